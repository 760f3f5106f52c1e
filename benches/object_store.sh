#!/usr/bin/env bash
# Uploads against boto3 on the same local S3 server: 1 GiB local -> s3 by `convert`, by boto3's
# upload_file with its default TransferConfig (8 MiB parts, 10 threads), and by boto3 with our
# part size and parts in flight; interleaved, ROUNDS rounds, medians of wall time and of peak RSS
# (/usr/bin/time -v). The file is 256 tensors of 4 MiB (a many-tensor checkpoint, not one blob).
#
#   moto_server -H 127.0.0.1 -p 5077 &      # pip install "moto[server]==5.1.4" boto3
#   CONVERT=target/release/safetensors-convert PYTHON=venv/bin/python benches/object_store.sh http://127.0.0.1:5077
#
# PART_MIB and IN_FLIGHT (default: convert's defaults, 8 and 8) are given to convert through
# SAFETENSORS_STREAM_PART_SIZE / SAFETENSORS_STREAM_PARTS_IN_FLIGHT and to boto3's "same parts"
# run as multipart_chunksize / max_concurrency. ALL=1 also times downloads and the fan-out.
# Needs ~3 GB of free disk (the file, and moto's copy); removes what it makes.
set -euo pipefail
B=$(realpath "${CONVERT:-target/release/safetensors-convert}")
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-5}
PART_MIB=${PART_MIB:-8}
IN_FLIGHT=${IN_FLIGHT:-8}
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
export AWS_ENDPOINT=$1 AWS_ALLOW_HTTP=true
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MANIFEST=$D/man.json $PY - <<'PY'
import json, os
json.dump([{"name": f"layers.{i}.weight", "dtype": "U8", "shape": [4 << 20], "offset": i * (4 << 20)}
           for i in range(256)], open(os.environ["MANIFEST"], "w"))
PY
head -c $((1<<30)) /dev/urandom > $D/big.bin
$B $D/big.bin --raw-manifest $D/man.json -o $D/big.safetensors --quiet --no-sync
rm $D/big.bin
AUTH="Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
del() { curl -s -X DELETE -H "$AUTH" "$AWS_ENDPOINT/bench/$1" -o /dev/null; }
curl -s -X PUT "$AWS_ENDPOINT/bench" -o /dev/null

# One timed run: LABEL COMMAND...; appends "LABEL seconds maxrss_kb" to $D/runs.
timed() {
  local label=$1; shift
  /usr/bin/time -v -o $D/time "$@"
  local e m
  e=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' $D/time)
  m=$(awk -F': ' '/Maximum resident set size/ {print $2}' $D/time)
  echo "$label $e $m" >> $D/runs
}
# boto3's upload: FILE KEY [CHUNK_BYTES CONCURRENCY] (without them, TransferConfig's defaults).
cat > $D/boto.py <<'PY'
import os, sys
import boto3
from boto3.s3.transfer import TransferConfig
c = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT"])
cfg = TransferConfig(multipart_chunksize=int(sys.argv[3]), max_concurrency=int(sys.argv[4])) if len(sys.argv) > 3 else TransferConfig()
c.upload_file(sys.argv[1], "bench", sys.argv[2], Config=cfg)
PY
PART=$((PART_MIB << 20))
for r in $(seq "$ROUNDS"); do
  timed convert env SAFETENSORS_STREAM_PART_SIZE=$PART SAFETENSORS_STREAM_PARTS_IN_FLIGHT=$IN_FLIGHT \
    $B $D/big.safetensors -o s3://bench/ours.safetensors --quiet
  del ours.safetensors
  timed boto3-defaults $PY $D/boto.py $D/big.safetensors boto.safetensors
  del boto.safetensors
  timed boto3-same-parts $PY $D/boto.py $D/big.safetensors same.safetensors $PART $IN_FLIGHT
  del same.safetensors
done
RUNS=$D/runs PART_MIB=$PART_MIB IN_FLIGHT=$IN_FLIGHT $PY - <<'PY'
import os, statistics
runs = {}
for line in open(os.environ["RUNS"]):
    label, elapsed, rss = line.split()
    secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(elapsed.split(":"))))
    runs.setdefault(label, []).append((secs, int(rss) / 1024))
print(f"1 GiB (256 tensors) local -> s3, {len(runs['convert'])} interleaved rounds, medians; "
      f"convert: {os.environ['PART_MIB']} MiB parts, {os.environ['IN_FLIGHT']} in flight")
med = {k: (statistics.median(s for s, _ in v), statistics.median(m for _, m in v)) for k, v in runs.items()}
for label, (secs, rss) in med.items():
    times = " ".join(f"{s:.2f}" for s, _ in runs[label])
    print(f"  {label:17} {secs:6.2f} s  {1024 / secs:6.1f} MiB/s  peak RSS {rss:6.1f} MiB   ({times})")
ours = med["convert"][0]
print(f"  ratio convert/boto3-defaults {ours / med['boto3-defaults'][0]:.2f}, "
      f"convert/boto3-same-parts {ours / med['boto3-same-parts'][0]:.2f} (time; <= 1.0: as fast or faster)")
PY

[ "${ALL:-0}" = 1 ] || exit 0
t() { /usr/bin/time -f "%e s, max RSS %M KB" "$@"; }
$B $D/big.safetensors -o s3://bench/down.safetensors --quiet
echo "== convert download 1 GiB (ranged GETs, one per tensor)"; t $B s3://bench/down.safetensors -o $D/down.safetensors --quiet --no-sync
cmp $D/down.safetensors $D/big.safetensors && echo "downloaded bytes identical"
rm -f $D/down.safetensors
echo "== boto3 download_file 1 GiB"
t $PY -c "import boto3,os; boto3.client('s3',endpoint_url=os.environ['AWS_ENDPOINT']).download_file('bench','down.safetensors','$D/down.safetensors')"
rm -f $D/down.safetensors
del down.safetensors
ARGS="$D/big.safetensors --max-shard-size 256MiB -o s3://bench/fan/model.safetensors --quiet"
N=$($B $ARGS --dry-run --json | $PY -c "import json,sys; print(len(json.load(sys.stdin)['outputs']))")
echo "== fan-out, 1 GiB: $N shards"
for W in 1 2 4; do
  s=$(date +%s.%N)
  seq $N | xargs -P $W -I K $B $ARGS --shard K
  $B $ARGS --index-only
  e=$(date +%s.%N)
  echo "workers=$W: $($PY -c "print(f'{$e-$s:.2f}')") s"
done
for K in $(seq $N); do del "fan/model-0000$K-of-0000$N.safetensors"; done
del fan/model.safetensors.index.json
