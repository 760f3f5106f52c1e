#!/usr/bin/env python3
"""The baseline client: boto3 with TransferConfig's defaults, as a user writes it.

    baseline.py down s3://BUCKET/PREFIX DIR   # every object under PREFIX into DIR
    baseline.py up DIR s3://BUCKET/PREFIX     # every file of DIR under PREFIX

One object after another (download_file / upload_file, each multipart with TransferConfig's
defaults: 8 MiB parts, 10 threads, past an 8 MiB threshold). The endpoint and keys come from
AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (s3_server.sh prints them).
"""

import os
import sys

import boto3
from boto3.s3.transfer import TransferConfig


def split(url):
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.rstrip("/")


def main():
    verb, a, b = sys.argv[1:4]
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    cfg = TransferConfig()
    if verb == "down":
        bucket, prefix = split(a)
        os.makedirs(b, exist_ok=True)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        for page in pages:
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) + 1:]
                s3.download_file(bucket, obj["Key"], os.path.join(b, name), Config=cfg)
    elif verb == "up":
        bucket, prefix = split(b)
        for name in sorted(os.listdir(a)):
            s3.upload_file(os.path.join(a, name), bucket, f"{prefix}/{name}", Config=cfg)
    else:
        sys.exit(f"unknown verb {verb}")


if __name__ == "__main__":
    main()
