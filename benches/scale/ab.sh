#!/usr/bin/env bash
# Builds compared S3 -> S3 on one s3s-fs, interleaved, each run split into its copy and the
# wait for completions after it (phases.py), with `aws s3 cp --recursive` down + up in every
# round as the baseline.
#
#   PYTHON=/work/venvs/scale/bin/python S3S_FS=/work/tools/bin/s3s-fs ROUNDS=3 \
#     benches/scale/ab.sh IN WORK 'main=/work/bin-s8' 'new=target/release/convert' \
#     'new-5MiB=env SAFETENSORS_STREAM_PART_SIZE=5MiB target/release/convert'
#
# Each LABEL=COMMAND is run as `COMMAND s3://input/ds/INDEX --dequantize --max-shard-size
# 500MB -o s3://output/LABEL/model.safetensors --quiet` (run.sh's `s3`), its output compared
# byte for byte with a local run of the first command, then deleted. Prints one line a run
# (phases.py's, with the label, round and load) and keeps them in WORK/ab.txt (when each object
# appeared: WORK/objects.txt); the peak RSS of each run from `/usr/bin/time -v`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IN=$(realpath "${1:?IN (a generate.py output folder)}")
W=$(realpath -m "${2:?WORK folder}")
shift 2
[ $# -ge 1 ] || { echo "give LABEL=COMMAND at least once" >&2; exit 2; }
PY=${PYTHON:-python3}
AWS=$(dirname "$PY")/aws
ROUNDS=${ROUNDS:-3}
SHARD=${SHARD:-500MB}
index=model.safetensors.index.json
CONV=(--dequantize --max-shard-size "$SHARD")

mkdir -p "$W"
cleanup() {
    "$here/s3_server.sh" stop "$W/s3" || true
    rm -rf "$W/s3/root" "$W/ref" "$W/down" "$W/time"
}
trap cleanup EXIT
S3S_FS=$("$here/s3_server.sh" binary "$W/s3s-fs")
export S3S_FS
eval "$("$here/s3_server.sh" start "$W/s3")"
"$here/s3_server.sh" put "$IN" s3://input/ds >/dev/null
pid=$(cat "$W/s3/s3s.pid")
bucket=$W/s3/root/output
first=${1#*=}
# shellcheck disable=SC2086 # COMMAND is words on purpose
$first "$IN/$index" "${CONV[@]}" -o "$W/ref/model.safetensors" --quiet --no-sync

load() { cut -d' ' -f1 /proc/loadavg; }
rss() { awk -F': ' '/Maximum resident/ {print int($2 / 1024) " MiB"}' "$W/time"; }
: >"$W/ab.txt"
: >"$W/objects.txt"
for round in $(seq "$ROUNDS"); do
    for spec in "$@" aws; do
        label=${spec%%=*}
        sync
        l0=$(load)
        if [ "$label" = aws ]; then
            line=$("$PY" "$here/phases.py" --server-pid "$pid" --watch "$bucket" -- \
                sh -c '"$1" s3 cp --recursive --quiet s3://input/ds "$2" &&
                       "$1" s3 cp --recursive --quiet "$3" s3://output/aws' _ "$AWS" "$W/down" "$W/ref" \
                2>>"$W/objects.txt")
            rm -rf "$W/down" "$bucket/aws"
            echo "round $round $label (load $l0): $line" | tee -a "$W/ab.txt"
            continue
        fi
        # shellcheck disable=SC2086
        line=$("$PY" "$here/phases.py" --server-pid "$pid" --watch "$bucket" -- \
            /usr/bin/time -v -o "$W/time" ${spec#*=} "s3://input/ds/$index" "${CONV[@]}" \
            -o "s3://output/$label/model.safetensors" --quiet 2>>"$W/objects.txt")
        diff -r -q "$W/ref" "$bucket/$label" || { echo "$label differs" >&2; exit 1; }
        rm -rf "${bucket:?}/$label"
        echo "round $round $label (load $l0): $line, peak $(rss)" | tee -a "$W/ab.txt"
    done
done
