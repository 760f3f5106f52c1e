#!/usr/bin/env bash
# Object storage figures of the README ("Object storage and many machines"): upload and
# download of 1 GiB by convert and by boto3 against a local S3 server, the upload's max RSS,
# and the fan-out's wall time for N = 1, 2, 4 workers (256 MiB in 4 shards).
#
#   moto_server -H 127.0.0.1 -p 5077 &      # pip install "moto[server]==5.1.4" boto3
#   CONVERT=target/debug/convert PYTHON=venv/bin/python benches/object_store.sh http://127.0.0.1:5077
#
# Needs ~4 GB of free disk (the file, and moto's copy); removes what it makes.
set -euo pipefail
B=$(realpath "${CONVERT:-target/release/convert}")
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
export AWS_ENDPOINT=$1 AWS_ALLOW_HTTP=true
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
head -c $((1<<30)) /dev/urandom > $D/big.bin
$B $D/big.bin --raw-dtype U8 --raw-shape $((1<<30)) --name w -o $D/big.safetensors --quiet --no-sync
rm $D/big.bin
AUTH="Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
del() { curl -s -X DELETE -H "$AUTH" "$AWS_ENDPOINT/bench/$1" -o /dev/null; }
curl -s -X PUT "$AWS_ENDPOINT/bench" -o /dev/null
t() { /usr/bin/time -f "%e s, max RSS %M KB" "$@"; }
PY=${PYTHON:-python3}
echo "== convert upload 1 GiB"; t $B $D/big.safetensors -o s3://bench/big.safetensors --quiet
del big.safetensors
echo "== boto3 upload_file 1 GiB (default TransferConfig: 8 MiB parts, 10 threads)"
t $PY -c "import boto3,os; boto3.client('s3',endpoint_url=os.environ['AWS_ENDPOINT']).upload_file('$D/big.safetensors','bench','boto.safetensors')"
echo "== convert download 1 GiB (ranged GET of the one tensor)"; t $B s3://bench/boto.safetensors -o $D/down.safetensors --quiet --no-sync
cmp $D/down.safetensors $D/big.safetensors && echo "downloaded bytes identical"
rm -f $D/down.safetensors
echo "== boto3 download_file 1 GiB"
t $PY -c "import boto3,os; boto3.client('s3',endpoint_url=os.environ['AWS_ENDPOINT']).download_file('bench','boto.safetensors','$D/down.safetensors')"
rm -f $D/down.safetensors
del boto.safetensors
MANIFEST=$D/man.json $PY - <<'PY'
import json
import os; json.dump([{"name":f"t{i}","dtype":"U8","shape":[64<<20],"offset":i*(64<<20)} for i in range(4)],open(os.environ["MANIFEST"],"w"))
PY
head -c $((256<<20)) $D/big.safetensors > $D/quarter.bin
$B $D/quarter.bin --raw-manifest $D/man.json -o $D/multi.safetensors --quiet --no-sync
rm -f $D/quarter.bin
ARGS="$D/multi.safetensors --max-shard-size 64MiB -o s3://bench/fan/model.safetensors --quiet"
N=$($B $ARGS --dry-run --json | $PY -c "import json,sys; print(len(json.load(sys.stdin)['outputs']))")
echo "== fan-out, 256 MiB: $N shards"
for W in 1 2 4; do
  s=$(date +%s.%N)
  seq $N | xargs -P $W -I K $B $ARGS --shard K
  $B $ARGS --index-only
  e=$(date +%s.%N)
  echo "workers=$W: $($PY -c "print(f'{$e-$s:.2f}')") s"
done
for K in $(seq $N); do del "fan/model-0000$K-of-0000$N.safetensors"; done
del fan/model.safetensors.index.json
rm -f $D/multi.safetensors
