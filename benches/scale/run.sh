#!/usr/bin/env bash
# The runs of benches/scale/README.md on a generated checkpoint, with their baselines on the
# same bytes and the same server, interleaved over ROUNDS rounds (default 3); then the medians,
# their ratios and the tables, written into README.md between its `scale:PRESET` markers.
#
#   PYTHON=/work/venvs/scale/bin/python CONVERT=target/release/convert \
#       benches/scale/run.sh /work/scale-data/small /tmp/scale-work
#
# The configurations (ONLY=... to choose; each output compared byte for byte with the
# reference, a local single-process run of the same options):
#   cp          `cp -r` of the reference output (the bytes written), no sync
#   local       convert --dequantize --max-shard-size $SHARD, local -> local, --no-sync
#   cp-sync     `cp -r` then `sync` of the copied files
#   local-sync  the same conversion, durable (convert's default: fsync)
#   plan-local  convert --dry-run of the local input; plan-s3 the same from the bucket
#   s3          the conversion s3://input -> s3://output on s3s-fs
#   s3-in       its two halves: s3://input -> local (--no-sync); s3-out local -> s3://output
#   boto3       boto3 (TransferConfig defaults) downloading the input, then uploading the output
#   awscli      `aws s3 cp --recursive`, the same two transfers
#   fanout-1    the Indexed Job's commands (dry run, --shard K, --index-only), S3 -> S3, 1 worker
#   fanout-2    the same with 2 worker processes
#   local-fanout-1, local-fanout-2  the same local -> local (no server to be the limit)
#   stride-1, stride-2, local-stride-1, local-stride-2  the same with one process a worker
#               (--shard K --shard-stride WORKERS: each plans once), S3 -> S3 and local
#   dask        deploy/dask_fanout.py, a LocalCluster of 2 workers, S3 -> S3 (PYTHON needs dask)
#   dask-kill   the same, one `convert --shard` SIGKILLed mid-shard: retried, output byte-equal
#   dask-replaced  the same, one input object replaced mid-run: refused, no index committed
# The input is uploaded once through the S3 API (s3_server.sh put): s3s-fs then keeps its
# ETags, as a real store does, and every client reads the same objects.
#
# Environment: CONVERT (the binary), PYTHON (with boto3 and awscli; AWS: the aws CLI, next to
# it by default), S3S_FS (else s3s-fs 0.14.1 on PATH, else a release build into WORK/s3s-fs),
# ROUNDS, SHARD (500MB: several output shards at the small preset's scale), ONLY, README (the
# file the tables go into; README=/dev/null to leave it), QUIET_FILE (pause between runs while
# that file exists), PROBE=0 to skip server_probe.py at the end. WORK's large files are
# removed on exit; WORK keeps raw.tsv and meta.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IN=$(realpath "${1:?IN (a generate.py output folder)}")
W=$(realpath -m "${2:?WORK}")
B=$(realpath "${CONVERT:-target/release/convert}")
PY=${PYTHON:-python3}
AWS=${AWS:-$(dirname "$PY")/aws}
ROUNDS=${ROUNDS:-3}
SHARD=${SHARD:-500MB}
ONLY=${ONLY:-cp local cp-sync local-sync plan-local plan-s3 s3 s3-in s3-out boto3 awscli fanout-1 fanout-2 local-fanout-1 local-fanout-2 dask dask-kill dask-replaced}
README=${README:-$here/README.md}
CONV=(--dequantize --max-shard-size "$SHARD")
index=model.safetensors.index.json
preset=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["synthetic"]["preset"])' "$IN/config.json")

case " $ONLY " in *" dask"*)
    "$PY" -c 'import dask.distributed' ||
        { echo "ONLY has Dask runs: install dask[distributed] into PYTHON's venv" >&2; exit 2; } ;;
esac
mkdir -p "$W"
rm -rf "$W/s3/root" "$W/ref" "$W/out" "$W/down"
cleanup() {
    "$here/s3_server.sh" stop "$W/s3"
    rm -rf "$W/s3/root" "$W/ref" "$W/out" "$W/down" "$W"/time.*
}
trap cleanup EXIT
quiet() { [ -z "${QUIET_FILE:-}" ] || while [ -e "$QUIET_FILE" ]; do sleep 20; done; }

# The server: a release build unless one is given (its speed is measured here).
S3S_FS=$(S3S_PROFILE=release "$here/s3_server.sh" binary "$W/s3s-fs")
export S3S_FS
eval "$("$here/s3_server.sh" start "$W/s3")"
t0=$(date +%s.%N)
"$here/s3_server.sh" put "$IN" s3://input/ds
up=$(echo "$(date +%s.%N) - $t0" | bc)

: >"$W/raw.tsv"
{
    echo "preset $preset"
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit $(git -C "$here" rev-parse --short HEAD) ($(basename "$B"))"
    echo "load_start $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "input_bytes $(du -cb "$IN"/* | tail -1 | cut -f1)"
    echo "input_files $(ls "$IN" | wc -l)"
    echo "upload The input went in through the S3 API (curl, 4 PUTs at a time) in $(printf %.1f "$up") s."
} >"$W/meta"

# The server's CPU seconds so far (user + sys), to charge each run what it cost the server.
tick=$(getconf CLK_TCK)
server_cpu() { awk -v t="$tick" '{print ($14 + $15) / t}' "/proc/$(cat "$W/s3/s3s.pid")/stat"; }
# FILE...: `/usr/bin/time -v` outputs summed: CPU seconds (user + sys), the largest peak RSS.
cpu_rss() {
    awk -F': ' '/(User|System) time/ {c += $2} /Maximum resident/ {if ($2 > k) k = $2}
        END {print c, k}' "$@"
}
# LABEL CMD...: one timed process. raw.tsv gets: round, label, wall seconds, peak RSS (KiB),
# the process's CPU seconds, the server's CPU seconds meanwhile.
round=0
timed() {
    local label=$1 s0 c0 rss cpu; shift
    c0=$(server_cpu)
    /usr/bin/time -v -o "$W/time.$label" "$@" >/dev/null
    s0=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$W/time.$label")
    read -r cpu rss <<<"$(cpu_rss "$W/time.$label")"
    echo "$round $label $s0 $rss $cpu $(echo "$(server_cpu) - $c0" | bc)" | tee -a "$W/raw.tsv"
}
# LABEL SUBLABEL...: a row made of the rows just measured (times summed, largest RSS).
combined() {
    local label=$1; shift
    local pattern
    pattern=$(printf '%s|' "$@")
    awk -v r="$round" -v l="$label" -v p="^(${pattern%|})$" '
        $1 == r && $2 ~ p {s += $3; if ($4 > k) k = $4; c += $5; v += $6}
        END {print r, l, s, k, c, v}' "$W/raw.tsv" | tee -a "$W/raw.tsv"
}
# A fan-out of WORKERS processes, S3 -> S3, as the Indexed Job runs it: the wall time of the
# whole (plan, shards, index), the largest peak RSS of any one of its processes, their CPU
# seconds summed.
fanout() { # LABEL WORKERS INPUT OUTPUT
    local label=$1 workers=$2 plan n id t0 c0 args cpu rss
    args=("$3" -o "$4" "${CONV[@]}")
    t0=$(date +%s.%N)
    c0=$(server_cpu)
    plan=$(/usr/bin/time -v -o "$W/time.fan.plan" "$B" "${args[@]}" --dry-run --json)
    n=$(echo "$plan" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["outputs"]))')
    id=$(echo "$plan" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["plan_id"])')
    case $label in
    *stride*) # one process a worker, each planning once: --shard K --shard-stride WORKERS
        seq "$workers" | xargs -P "$workers" -I {} /usr/bin/time -v -o "$W/time.fan.{}" \
            "$B" "${args[@]}" --expect-plan "$id" --shard {} --shard-stride "$workers" --quiet ;;
    *) # one process a shard, as the Indexed Job runs them
        seq "$n" | xargs -P "$workers" -I {} /usr/bin/time -v -o "$W/time.fan.{}" \
            "$B" "${args[@]}" --expect-plan "$id" --shard {} --quiet ;;
    esac
    /usr/bin/time -v -o "$W/time.fan.index" "$B" "${args[@]}" --expect-plan "$id" --index-only --quiet
    read -r cpu rss <<<"$(cpu_rss "$W"/time.fan.*)"
    echo "$round $label $(echo "$(date +%s.%N) - $t0" | bc) $rss $cpu" \
        "$(echo "$(server_cpu) - $c0" | bc)" | tee -a "$W/raw.tsv"
    rm -f "$W"/time.fan.*
}
# The Dask driver (deploy/dask_fanout.py, a LocalCluster of 2 worker processes), S3 -> S3:
# LABEL DEST [DISRUPT]. Wall time of the whole (the cluster's start included); peak RSS: the
# largest convert process (sampled from /proc every 0.2 s: they run under Dask's workers).
# DISRUPT, run beside it 3 s after the first shard's process started: `kill` SIGKILLs one
# `convert --shard` process (Dask retries its task, the retry writes the same bytes);
# `replace` puts other bytes under one input object (the shards that read it and the
# index refuse: the driver must fail and commit nothing).
dask() {
    local label=$1 dest=$2 disrupt=${3:-} t0 pid rc=0 peak=0 r p victim= seen=
    t0=$(date +%s.%N)
    "$PY" "$here/../../deploy/dask_fanout.py" --workers 2 --convert "$B" -- \
        "s3://input/ds/$index" -o "$dest" "${CONV[@]}" 2>"$W/dask.log" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        victim=
        for p in $(pgrep -f -- "$B .*--shard" || true); do
            r=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
            [ "${r:-0}" -gt "$peak" ] && peak=$r
            victim=$p
        done
        [ -n "${victim:-}" ] && [ -z "${seen:-}" ] && seen=$SECONDS
        if [ -n "$disrupt" ] && [ -n "${seen:-}" ] && [ $((SECONDS - seen)) -ge 3 ]; then
            case $disrupt in
            kill) [ -z "$victim" ] || { kill -KILL "$victim" && disrupt= &&
                echo "killed convert $victim mid-shard" >&2; } ;;
            replace) replace_input; disrupt= ;;
            esac
        fi
        sleep 0.2
    done
    wait "$pid" || rc=$?
    echo "$round $label $(echo "$(date +%s.%N) - $t0" | bc) $peak" | tee -a "$W/raw.tsv"
    tail -3 "$W/dask.log" >&2
    return "$rc"
}
# Another version of the input's last shard under its key (one data byte changed: a valid
# file, another ETag), then, once the run is over, the original put back (restore_input).
last_shard=$(cd "$IN" && ls model-*.safetensors | tail -1)
replace_input() {
    cp "$IN/$last_shard" "$W/replaced.safetensors"
    local size
    size=$(stat -c %s "$W/replaced.safetensors")
    printf '\x01' | dd of="$W/replaced.safetensors" bs=1 seek=$((size - 1)) conv=notrunc status=none
    mkdir -p "$W/replaced" && mv "$W/replaced.safetensors" "$W/replaced/$last_shard"
    "$here/s3_server.sh" put "$W/replaced" s3://input/ds
    rm -rf "$W/replaced"
    echo "replaced s3://input/ds/$last_shard mid-run" >&2
}
restore_input() {
    mkdir -p "$W/restore" && cp "$IN/$last_shard" "$W/restore/"
    "$here/s3_server.sh" put "$W/restore" s3://input/ds
    rm -rf "$W/restore"
}
same() { # DIR: byte-equal to the reference, file for file
    diff -r -q "$W/ref" "$1" || { echo "$1 differs from the reference" >&2; exit 1; }
    rm -rf "$1"
}

# The reference output: the byte count, what `cp` copies, what every run must equal.
"$B" "$IN/$index" "${CONV[@]}" -o "$W/ref/model.safetensors" --quiet --no-sync
echo "output_bytes $(du -cb "$W"/ref/* | tail -1 | cut -f1)" >>"$W/meta"
echo "output_files $(ls "$W/ref" | wc -l)" >>"$W/meta"
cat "$W/meta"
out=$W/out
bucket=$W/s3/root/output
for round in $(seq "$ROUNDS"); do
    for what in $ONLY; do
        quiet
        sync
        case $what in
        cp) timed cp cp -r "$W/ref" "$out"; same "$out" ;;
        cp-sync)
            timed cp-sync sh -c 'cp -r "$1" "$2" && sync "$2"/*' _ "$W/ref" "$out"
            same "$out" ;;
        local)
            timed local "$B" "$IN/$index" "${CONV[@]}" -o "$out/model.safetensors" --quiet --no-sync
            same "$out" ;;
        local-sync)
            timed local-sync "$B" "$IN/$index" "${CONV[@]}" -o "$out/model.safetensors" --quiet
            same "$out" ;;
        plan-local) timed plan-local "$B" "$IN/$index" "${CONV[@]}" -o "$out/model.safetensors" --dry-run ;;
        plan-s3)
            timed plan-s3 "$B" "s3://input/ds/$index" "${CONV[@]}" -o s3://output/s3/model.safetensors --dry-run ;;
        s3)
            timed s3 "$B" "s3://input/ds/$index" "${CONV[@]}" -o s3://output/s3/model.safetensors --quiet
            same "$bucket/s3" ;;
        s3-in)
            timed s3-in "$B" "s3://input/ds/$index" "${CONV[@]}" -o "$out/model.safetensors" --quiet --no-sync
            same "$out" ;;
        s3-out)
            timed s3-out "$B" "$IN/$index" "${CONV[@]}" -o s3://output/s3/model.safetensors --quiet
            same "$bucket/s3" ;;
        boto3)
            timed boto3-down "$PY" "$here/baseline.py" down s3://input/ds "$W/down"
            diff -r -q "$IN" "$W/down" || { echo "boto3's download differs" >&2; exit 1; }
            rm -rf "$W/down"
            timed boto3-up "$PY" "$here/baseline.py" up "$W/ref" s3://output/boto
            combined boto3 boto3-down boto3-up
            same "$bucket/boto" ;;
        awscli)
            timed aws-down "$AWS" s3 cp --recursive --quiet s3://input/ds "$W/down"
            diff -r -q "$IN" "$W/down" || { echo "aws's download differs" >&2; exit 1; }
            rm -rf "$W/down"
            timed aws-up "$AWS" s3 cp --recursive --quiet "$W/ref" s3://output/aws
            combined awscli aws-down aws-up
            same "$bucket/aws" ;;
        fanout-1|fanout-2)
            fanout "$what" "${what#fanout-}" "s3://input/ds/$index" s3://output/fan/model.safetensors
            same "$bucket/fan" ;;
        local-fanout-1|local-fanout-2|local-stride-1|local-stride-2)
            fanout "$what" "${what##*-}" "$IN/$index" "$out/model.safetensors"
            same "$out" ;;
        stride-1|stride-2)
            fanout "$what" "${what#stride-}" "s3://input/ds/$index" s3://output/fan/model.safetensors
            same "$bucket/fan" ;;
        dask) dask dask s3://output/dask/model.safetensors; same "$bucket/dask" ;;
        dask-kill)
            dask dask-kill s3://output/kill/model.safetensors kill
            same "$bucket/kill" ;;
        dask-replaced)
            if dask dask-replaced s3://output/repl/model.safetensors replace; then
                echo "dask-replaced: the driver committed a set although an input was replaced" >&2
                exit 1
            fi
            restore_input
            grep -q "the plan changed" "$W/dask.log" ||
                { echo "dask-replaced: the driver failed, but not on the replaced input" >&2; exit 1; }
            [ ! -e "$bucket/repl/$index" ] ||
                { echo "dask-replaced: an index was committed" >&2; exit 1; }
            echo "dask-replaced: refused, no index committed" >&2
            rm -rf "$bucket/repl" ;;
        *) echo "unknown configuration $what" >&2; exit 2 ;;
        esac
    done
done
# Where the server is the limit: its CompleteMultipartUpload, alone and two at once, on
# objects the size of the largest output shard (server_probe.py).
if [ "${PROBE:-1}" = 1 ]; then
    quiet
    mib=$(( $(ls -S "$W/ref" | head -1 | xargs -I {} stat -c %s "$W/ref/{}") >> 20 ))
    echo "probe $("$PY" "$here/server_probe.py" --size-mib "$((mib > 8 ? mib : 8))")" >>"$W/meta"
fi
echo "load_end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$W/meta"
hwm=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$(cat "$W/s3/s3s.pid")/status")
echo "server_rss s3s-fs's own peak RSS over the whole run: $hwm MiB." >>"$W/meta"
"$PY" "$here/summarize.py" "$W/raw.tsv" "$W/meta" "$README"
