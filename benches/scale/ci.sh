#!/usr/bin/env bash
# End to end at DeepSeek-V3's structure, small: the `ci` preset (1,247 tensors in 16 FP8
# shards with 128x128 block scales, 5.5 MB) converted with --dequantize, and every output file
# compared byte for byte with a local single-process run of the same options:
#   1. local, one process: the references (resharded at 1MB; and one 8 MB file);
#   2. on a real S3 server (s3s-fs 0.14.1, benches/scale/s3_server.sh: reused when on PATH,
#      else built from crates.io into a throwaway folder), the input uploaded through the S3
#      API:
#      - S3 -> S3, one process, one 8 MB output object in 5 MiB parts (a multipart upload);
#      - S3 -> S3 fanned out as the Indexed Job runs it: a dry run for the plan id, then
#        2 worker processes taking the shards (--shard K --expect-plan ID), then --index-only
#        (the commit point); and again with one process a worker (--shard-stride 2);
#   3. local -> local fanned out the same way.
# The server is stopped and every file removed on exit.
#
#   PYTHON=venv/bin/python CONVERT=target/debug/convert benches/scale/ci.sh
#
# Needs python3 with numpy (PYTHON), curl, and cargo (to build s3s-fs) unless S3S_FS names
# the binary or s3s-fs 0.14.1 is on PATH. Exits non-zero on the first difference; prints
# "N passed, 0 failed" and the time each part took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=$(realpath "${CONVERT:-target/release/convert}")
PY=${PYTHON:-python3}
D=$(mktemp -d)
trap '"$here/s3_server.sh" stop "$D/s3"; rm -rf "$D"' EXIT
passed=0
check() { # LABEL REF DIR: every file of REF, byte-equal in DIR, and no other
    local label=$1 ref=$2 dir=$3
    diff <(cd "$ref" && ls) <(cd "$dir" && ls) >&2 || { echo "$label: other files" >&2; exit 1; }
    for f in "$ref"/*; do
        cmp "$f" "$dir/$(basename "$f")" || { echo "$label: $(basename "$f") differs" >&2; exit 1; }
    done
    echo "ok: $label ($(ls "$dir" | wc -l) files byte-equal)"
    passed=$((passed + 1))
}
CONV=(--dequantize --max-shard-size 1MB)
# The fan-out: ARGS... (input and -o); 2 workers over the planned shards, then the index.
fanout() {
    local plan n id
    plan=$("$B" "$@" "${CONV[@]}" --dry-run --json)
    n=$(echo "$plan" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["outputs"]))')
    id=$(echo "$plan" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["plan_id"])')
    [ "$n" -gt 2 ] || { echo "expected several output shards, the plan has $n" >&2; exit 1; }
    case ${STRIDE:-} in
    "") seq "$n" | xargs -P 2 -I {} "$B" "$@" "${CONV[@]}" --expect-plan "$id" --shard {} --quiet ;;
    *) # one process a worker: --shard K --shard-stride 2
        seq 2 | xargs -P 2 -I {} "$B" "$@" "${CONV[@]}" --expect-plan "$id" --shard {} \
            --shard-stride 2 --quiet ;;
    esac
    "$B" "$@" "${CONV[@]}" --expect-plan "$id" --index-only --quiet
}
started=$SECONDS
"$PY" "$here/generate.py" --preset ci "$D/in" >/dev/null
index=model.safetensors.index.json

# 1. The references: local, one process.
"$B" "$D/in/$index" "${CONV[@]}" -o "$D/ref/model.safetensors" --quiet
"$B" "$D/in/$index" --dequantize -o "$D/ref1/model.safetensors" --quiet
[ "$(stat -c %s "$D/ref1/model.safetensors")" -gt $((5 << 20)) ] ||
    { echo "the single output is under one 5 MiB part: no multipart upload" >&2; exit 1; }
echo "generated and converted locally in $((SECONDS - started)) s"

# 2. On s3s-fs, the input uploaded through the S3 API.
t=$SECONDS
S3S_FS=$("$here/s3_server.sh" binary "$D/s3s-fs")
export S3S_FS
echo "s3s-fs: $S3S_FS ($((SECONDS - t)) s)"
t=$SECONDS
eval "$("$here/s3_server.sh" start "$D/s3")"
"$here/s3_server.sh" put "$D/in" s3://input/ds
SAFETENSORS_STREAM_PART_SIZE=5MiB "$B" "s3://input/ds/$index" --dequantize \
    -o s3://output/one/model.safetensors --quiet
check "s3 -> s3, one process, multipart" "$D/ref1" "$D/s3/root/output/one"
# s3s-fs keeps the ETag it answered beside the bucket folders: a multipart one ends "-PARTS".
b64() { printf %s "$1" | base64 -w0 | tr '+/' '-_' | tr -d '='; }
grep -q '"e_tag":"[0-9a-f]*-2"' \
    "$D/s3/root/.bucket-$(b64 output).object-$(b64 one/model.safetensors).internal.json" ||
    { echo "the 8 MB object was not uploaded in 2 parts" >&2; exit 1; }
fanout "s3://input/ds/$index" -o s3://output/ds/model.safetensors
check "s3 -> s3, 2 workers" "$D/ref" "$D/s3/root/output/ds"
STRIDE=1 fanout "s3://input/ds/$index" -o s3://output/stride/model.safetensors
check "s3 -> s3, 2 strided workers (--shard-stride 2)" "$D/ref" "$D/s3/root/output/stride"
echo "s3 runs: $((SECONDS - t)) s"

# 3. The same fan-out, local -> local.
fanout "$D/in/$index" -o "$D/local2/model.safetensors"
check "local, 2 workers" "$D/ref" "$D/local2"

echo "scale ci: $((SECONDS - started)) s"
echo "$passed passed, 0 failed"
