#!/usr/bin/env bash
# The three runs of benches/scale/README.md on a generated checkpoint, with their baselines on
# the same bytes and the same server, interleaved, ROUNDS rounds (default 1):
#   cp        `cp -r` of the local conversion's output (the bytes written)
#   local     convert --dequantize --max-shard-size $SHARD, local -> local (--no-sync, as cp)
#   s3        the same, s3://input -> s3://output on s3s-fs
#   boto3     boto3 (TransferConfig defaults) downloading the input and uploading the output
#   awscli    `aws s3 cp --recursive`, the same two transfers
#   fanout-1  the Indexed Job's commands (dry run, --shard K, --index-only), S3 -> S3, 1 worker
#   fanout-2  the same with 2 worker processes
# Each line: label, seconds, MiB/s of the conversion's output bytes, the largest peak RSS of
# any one process (MiB, /usr/bin/time -v).
#
#   PYTHON=/work/venvs/scale/bin/python CONVERT=target/release/convert \
#       benches/scale/run.sh /work/scale-data/small /work/scale-work
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IN=$(realpath "$1")
W=$(realpath -m "$2")
B=$(realpath "${CONVERT:-target/release/convert}")
PY=${PYTHON:-python3}
AWS=${AWS:-$(dirname "$PY")/aws}
ROUNDS=${ROUNDS:-1}
SHARD=${SHARD:-500MB}
ONLY=${ONLY:-cp local s3 boto3 awscli fanout-1 fanout-2}
mkdir -p "$W"
trap '"$here/s3_server.sh" stop "$W/s3"' EXIT
eval "$("$here/s3_server.sh" start "$W/s3")"
mkdir -p "$W/s3/root/input/ds" "$W/s3/root/output"
cp -l "$IN"/* "$W/s3/root/input/ds/" 2>/dev/null || cp "$IN"/* "$W/s3/root/input/ds/"
CONV=(--dequantize --max-shard-size "$SHARD")

# LABEL CMD...: one timed process; prints seconds and peak RSS (KiB).
timed() {
    local label=$1; shift
    /usr/bin/time -v -o "$W/time.$label" "$@" >/dev/null
    awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}
                /Maximum resident set size/ {print $2}' "$W/time.$label" | paste -sd' '
}
# A fan-out of WORKERS processes, S3 -> S3: the wall time, the largest worker RSS.
fanout() {
    local workers=$1 plan n id t0 rss=0
    local args=(s3://input/ds/model.safetensors.index.json -o s3://output/fan/model.safetensors "${CONV[@]}")
    t0=$(date +%s.%N)
    plan=$("$B" "${args[@]}" --dry-run --json)
    n=$(echo "$plan" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["outputs"]))')
    id=$(echo "$plan" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["plan_id"])')
    seq "$n" | xargs -P "$workers" -I K /usr/bin/time -v -o "$W/time.fan.K" \
        "$B" "${args[@]}" --expect-plan "$id" --shard K --quiet
    "$B" "${args[@]}" --expect-plan "$id" --index-only --quiet
    for f in "$W"/time.fan.*; do
        rss=$(( $(awk -F': ' '/Maximum resident/ {print $2}' "$f") > rss ? $(awk -F': ' '/Maximum resident/ {print $2}' "$f") : rss ))
    done
    rm -f "$W"/time.fan.*
    echo "$(echo "$(date +%s.%N) - $t0" | bc) $rss"
}
out_bytes=0
report() { # LABEL "SECONDS RSS_KIB"
    local s r
    read -r s r <<<"$2"
    awk -v l="$1" -v s="$s" -v r="$r" -v b="$out_bytes" \
        'BEGIN {printf "%-9s %8.2f s %9.1f MiB/s %7.0f MiB\n", l, s, b/1048576/s, r/1024}'
}
# The reference output, for the byte counts and the copies.
rm -rf "$W/ref"
"$B" "$IN/model.safetensors.index.json" "${CONV[@]}" -o "$W/ref/model.safetensors" --quiet --no-sync
out_bytes=$(du -cb "$W"/ref/* | tail -1 | cut -f1)
echo "input $(du -cb "$IN"/* | tail -1 | cut -f1) bytes, output $out_bytes bytes in $(ls "$W/ref" | wc -l) files"
for r in $(seq "$ROUNDS"); do
    for what in $ONLY; do
        sync
        case $what in
        cp) rm -rf "$W/cp"; report cp "$(timed cp cp -r "$W/ref" "$W/cp")"; rm -rf "$W/cp" ;;
        local)
            rm -rf "$W/local"
            report local "$(timed local "$B" "$IN/model.safetensors.index.json" "${CONV[@]}" \
                -o "$W/local/model.safetensors" --quiet --no-sync)"
            diff -r -q "$W/ref" "$W/local"; rm -rf "$W/local" ;;
        s3)
            rm -rf "$W/s3/root/output/s3"
            report s3 "$(timed s3 "$B" s3://input/ds/model.safetensors.index.json "${CONV[@]}" \
                -o s3://output/s3/model.safetensors --quiet)"
            diff -r -q "$W/ref" "$W/s3/root/output/s3"; rm -rf "$W/s3/root/output/s3" ;;
        boto3)
            rm -rf "$W/down"
            read -r s1 r1 <<<"$(timed boto-down "$PY" "$here/baseline.py" down s3://input/ds "$W/down")"
            read -r s2 r2 <<<"$(timed boto-up "$PY" "$here/baseline.py" up "$W/ref" s3://output/boto)"
            report boto3 "$(echo "$s1 + $s2" | bc) $(( r1 > r2 ? r1 : r2 ))"
            echo "          (download $s1 s, upload $s2 s)"
            rm -rf "$W/down" "$W/s3/root/output/boto" ;;
        awscli)
            rm -rf "$W/down"
            read -r s1 r1 <<<"$(timed aws-down "$AWS" s3 cp --recursive --quiet s3://input/ds "$W/down")"
            read -r s2 r2 <<<"$(timed aws-up "$AWS" s3 cp --recursive --quiet "$W/ref" s3://output/aws)"
            report awscli "$(echo "$s1 + $s2" | bc) $(( r1 > r2 ? r1 : r2 ))"
            echo "          (download $s1 s, upload $s2 s)"
            rm -rf "$W/down" "$W/s3/root/output/aws" ;;
        fanout-1|fanout-2)
            rm -rf "$W/s3/root/output/fan"
            report "$what" "$(fanout "${what#fanout-}")"
            diff -r -q "$W/ref" "$W/s3/root/output/fan"; rm -rf "$W/s3/root/output/fan" ;;
        esac
    done
done
