#!/usr/bin/env bash
# End to end at DeepSeek-V3's structure, small: the `ci` preset (1,247 tensors in 16 FP8
# shards with 128x128 block scales, 5.5 MB) converted with --dequantize and resharded,
#   1. locally, one process: the reference;
#   2. S3 -> S3 on a real S3 server (s3s-fs, benches/scale/s3_server.sh), fanned out as the
#      Indexed Job runs it: a dry run for the plan id, then 2 worker processes taking the
#      shards (--shard K --expect-plan ID), then --index-only (the commit point);
#   3. local -> local fanned out the same way;
# and every output file compared byte for byte with the reference.
#
#   CONVERT=target/release/convert benches/scale/ci.sh
#
# Needs python3 with numpy (PYTHON=...), s3s-fs (S3S_FS=..., see s3_server.sh) and curl.
# Exits non-zero on the first difference; prints "N passed, 0 failed" at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=$(realpath "${CONVERT:-target/release/convert}")
PY=${PYTHON:-python3}
D=$(mktemp -d)
trap '"$here/s3_server.sh" stop "$D/s3"; rm -rf "$D"' EXIT
passed=0
check() { # LABEL DIR: every file of the reference, byte-equal in DIR, and no other
    local label=$1 dir=$2
    diff <(cd "$D/ref" && ls) <(cd "$dir" && ls) >&2 || { echo "$label: other files" >&2; exit 1; }
    for f in "$D/ref"/*; do
        cmp "$f" "$dir/$(basename "$f")" || { echo "$label: $(basename "$f") differs" >&2; exit 1; }
    done
    echo "ok: $label ($(ls "$dir" | wc -l) files byte-equal)"
    passed=$((passed + 1))
}
# The fan-out: ARGS... (input and -o); 2 workers over the planned shards, then the index.
fanout() {
    local plan n id
    plan=$("$B" "$@" --dequantize --max-shard-size 1MB --dry-run --json)
    n=$(echo "$plan" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["outputs"]))')
    id=$(echo "$plan" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["plan_id"])')
    seq "$n" | xargs -P 2 -I K "$B" "$@" --dequantize --max-shard-size 1MB \
        --expect-plan "$id" --shard K --quiet
    "$B" "$@" --dequantize --max-shard-size 1MB --expect-plan "$id" --index-only --quiet
}
started=$SECONDS
"$PY" "$here/generate.py" --preset ci "$D/in"

# 1. The reference: local, one process.
"$B" "$D/in/model.safetensors.index.json" --dequantize --max-shard-size 1MB \
    -o "$D/ref/model.safetensors" --quiet
[ "$(ls "$D/ref" | wc -l)" -gt 2 ] || { echo "expected several output shards" >&2; exit 1; }

# 2. S3 -> S3, 2 workers, on s3s-fs: the input laid in as files of bucket `input`.
eval "$("$here/s3_server.sh" start "$D/s3")"
mkdir -p "$D/s3/root/input/ds" "$D/s3/root/output"
cp "$D/in"/* "$D/s3/root/input/ds/"
fanout s3://input/ds/model.safetensors.index.json -o s3://output/ds/model.safetensors
check "s3 -> s3, 2 workers" "$D/s3/root/output/ds"

# 3. The same fan-out, local -> local.
fanout "$D/in/model.safetensors.index.json" -o "$D/local2/model.safetensors"
check "local, 2 workers" "$D/local2"

echo "scale ci: $((SECONDS - started)) s"
echo "$passed passed, 0 failed"
