#!/usr/bin/env python3
"""Where the S3 server itself is the limit: how long s3s-fs takes to complete a multipart
upload, alone and several at once (boto3's low-level calls, nothing of ours).

    server_probe.py [--size-mib 440] [--objects 3] [--rounds 3]

Each round uploads OBJECTS objects of SIZE MiB in 8 MiB parts (8 parts in flight), then
completes one of them alone and then the others all at once, timing each
CompleteMultipartUpload. A real S3 answers a complete in well under a second whatever the
size; s3s-fs concatenates the part files into the object (reading and hashing each) before it
answers, so a complete costs a copy of the object. Prints one line (medians) for README.
The endpoint and keys come from the environment that `s3_server.sh start` prints.
"""

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import boto3

PART = 8 << 20


def upload_parts(s3, bucket, key, size, pool):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    body = os.urandom(PART)
    n = -(-size // PART)

    def part(i):
        last = size - (n - 1) * PART
        data = body if i < n else body[:last]
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i, Body=data)["ETag"]
        return {"PartNumber": i, "ETag": etag}

    return up, list(pool.map(part, range(1, n + 1)))


def complete(s3, bucket, key, up, parts):
    t = time.perf_counter()
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": parts})
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=440)
    ap.add_argument("--objects", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    bucket = "probe"
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    size = a.size_mib << 20
    alone, together, each = [], [], []
    with ThreadPoolExecutor(8) as pool:
        for r in range(a.rounds):
            keys = [f"r{r}/o{i}" for i in range(a.objects)]
            ups = [upload_parts(s3, bucket, k, size, pool) for k in keys]
            alone.append(complete(s3, bucket, keys[0], *ups[0]))
            rest = list(zip(keys[1:], ups[1:]))
            t = time.perf_counter()
            with ThreadPoolExecutor(len(rest)) as many:
                each += many.map(lambda kv: complete(s3, bucket, kv[0], *kv[1]), rest)
            together.append(time.perf_counter() - t)
            for k in keys:
                s3.delete_object(Bucket=bucket, Key=k)
    m = statistics.median
    others = a.objects - 1
    print(f"s3s-fs CompleteMultipartUpload of a {a.size_mib} MiB object ({-(-size // PART)} parts): "
          f"{m(alone):.2f} s alone ({a.size_mib / m(alone):.0f} MiB/s of object), "
          f"{others} at once {m(together):.2f} s wall ({m(each):.2f} s each; "
          f"{others * a.size_mib / m(together):.0f} MiB/s together); medians of {a.rounds} rounds.")


if __name__ == "__main__":
    main()
