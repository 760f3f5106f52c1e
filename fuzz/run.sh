#!/usr/bin/env bash
# Runs every fuzz target for N seconds each, one after another.
#
#   fuzz/run.sh            # 600 s per target (the 10-minute runs)
#   fuzz/run.sh 10         # a smoke run: 10 s per target
#   fuzz/run.sh 60 detect npy_header   # only these targets
#
# Installs cargo-fuzz if it is missing, seeds each corpus from fixtures/,
# prints one summary line per target and exits non-zero if any target
# found a crash, panic, out-of-memory or timeout (its input is then in
# fuzz/artifacts/TARGET/; see fuzz/README.md for turning it into a
# regression test).
#
# Environment:
#   FUZZ_SANITIZER    none (default) or address (4-7x slower; the crate
#                     denies unsafe outside two modules of system calls and
#                     the C decoders are not instrumented by it, so it finds
#                     little more here)
#   CARGO_BUILD_JOBS  compile jobs (default 1: the machine is shared)
#   FUZZ_ARGS         extra libFuzzer flags, e.g. "-seed=1"
#   CARGO_TARGET_DIR  where the targets are built (default fuzz/target/SANITIZER)
#   FUZZ_NO_BUILD     set: run the binaries already built, without building
#                     (another cargo may hold the target folder's lock)
#   QUIET_FILE        while this file exists (default /work/QUIET, the
#                     machine's quiet window for benchmarks) no target
#                     starts, and a running fuzzer is stopped; the target
#                     then runs again for the time it had left.
set -uo pipefail

secs=${1:-600}
shift || true
all_targets=(safetensors_header npy_header zip_directory detect convert_bytes pickle bnb_record gguf_header dcp
    hdf5_file onnx_model msgpack_file quantized_record)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi

fuzz_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$fuzz_dir")
cd "$root" || exit 2

# cargo-fuzz needs nightly flags (-Zsanitizer, sancov passes): the nightly
# toolchain when there is one, else stable with RUSTC_BOOTSTRAP=1.
if rustup run nightly rustc --version >/dev/null 2>&1; then
    cargo=(cargo +nightly)
else
    cargo=(cargo)
    export RUSTC_BOOTSTRAP=1
fi
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
sanitizer=${FUZZ_SANITIZER:-none}
quiet_file=${QUIET_FILE:-/work/QUIET}
# Waits while the machine's quiet window lasts.
wait_quiet() {
    if [ -e "$quiet_file" ]; then
        echo "run.sh: $quiet_file exists: waiting" >&2
        while [ -e "$quiet_file" ]; do sleep 20; done
    fi
}
# -a: debug assertions and overflow checks, so an arithmetic overflow on
# a hostile size is a crash, as it is in `cargo test`.
build_dir=${CARGO_TARGET_DIR:-"$fuzz_dir/target/$sanitizer"}
build_flags=(-a -s "$sanitizer" --target-dir "$build_dir")

if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    echo "run.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked || exit 2
fi

# Seed inputs from fixtures/ (small files only: a large seed raises
# libFuzzer's max_len and slows every run).
seed() {
    local target=$1
    shift
    local dest="$fuzz_dir/corpus/$target"
    mkdir -p "$dest"
    find "$@" -type f -size -65k 2>/dev/null | while read -r f; do
        local name
        name=seed-$(echo "$f" | tr '/' '_')
        if [ "$target" = detect ]; then
            [ -e "$dest/$name" ] || head -c 32 "$f" >"$dest/$name"
        else
            [ -e "$dest/$name" ] || cp "$f" "$dest/$name"
        fi
    done
}
# The pickles inside the PyTorch fixtures (data.pkl of zips; legacy files whole).
seed_pickles() {
    local dest="$fuzz_dir/corpus/$1"
    mkdir -p "$dest"
    python3 - "$root/fixtures/pytorch" "$dest" <<'PY'
import pathlib, sys, zipfile
src, dest = map(pathlib.Path, sys.argv[1:])
for f in src.rglob("*"):
    if not f.is_file() or f.stat().st_size > 65536:
        continue
    name = "seed-" + str(f.relative_to(src)).replace("/", "_")
    try:
        with zipfile.ZipFile(f) as z:
            for n in z.namelist():
                if n.endswith("data.pkl"):
                    (dest / name).write_bytes(z.read(n))
    except zipfile.BadZipFile:
        (dest / name).write_bytes(f.read_bytes())
PY
}
# quantized_record: each fixture's model.safetensors behind the byte that
# picks its config.json (the order of QUANT_CONFIGS in fuzz/src/lib.rs).
seed_quantized() {
    local dest="$fuzz_dir/corpus/$1" k=0 name
    mkdir -p "$dest"
    for name in none awq bnb-4bit bnb-int8 fbgemm-fp8 fp8-compressed-tensors fp8-sharded gptq \
        gptq-8bit-v2 int-quantized mxfp4-compressed-tensors mxfp4 nvfp4-compressed-tensors \
        nvfp4-modelopt pack-quantized; do
        local d="$root/fixtures/quantized/$name" f
        [ "$name" = none ] && d="$root/fixtures/quantized/fp8-block"
        for f in "$d"/model*.safetensors; do
            [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 65536 ] || continue
            local out
            out="$dest/seed-$name-$(basename "$f")"
            [ -e "$out" ] || { printf "\\x$(printf %02x "$k")" && cat "$f"; } >"$out"
        done
        k=$((k + 1))
    done
    # Past the sixteenth config (bit 6 of the byte): ct-more's model behind
    # its own config and behind the hostile block structures.
    local f="$root/fixtures/quantized/ct-more/model.safetensors" byte
    for byte in 40 41 60 51; do
        out="$dest/seed-ct-more-$byte-$(basename "$f")"
        [ -e "$out" ] || { printf "\\x$byte" && cat "$f"; } >"$out"
    done
}
seed_all() {
    local fx="$root/fixtures"
    local ex=(-name '*.safetensors' -o -name '*.npy' -o -name '*.npz' -o -name '*.gz'
        -o -name '*.zst' -o -name '*.xz' -o -name '*.bz2')
    case $1 in
    safetensors_header) seed "$1" "$fx" -name '*.safetensors' ;;
    npy_header) seed "$1" "$fx" -name '*.npy' ;;
    zip_directory) seed "$1" "$fx" -name '*.npz' ;;
    pickle) seed_pickles "$1" ;;
    gguf_header) seed "$1" "$fx" -name '*.gguf' ;;
    dcp) seed "$1" "$fx/dcp" \( -name .metadata -o -name '*.metadata' \) ;;
    hdf5_file) seed "$1" "$fx/hdf5" \( -name '*.h5' -o -name '*.hdf5' \) ;;
    onnx_model) seed "$1" "$fx/onnx" -name '*.onnx' ;;
    msgpack_file) seed "$1" "$fx/msgpack" \( -name '*.msgpack' -o -name '*.mpk' \) ;;
    quantized_record) seed_quantized "$1" ;;
    bnb_record) mkdir -p "$fuzz_dir/corpus/$1" ;; # seeds: its regressions (fixtures/fuzz-regressions/bnb_record)
    detect | convert_bytes) seed "$1" "$fx" \( "${ex[@]}" \) ;;
    esac
    # Past regressions are seeds too.
    if [ -d "$fx/fuzz-regressions/$1" ]; then
        seed "$1" "$fx/fuzz-regressions/$1" -type f ! -name "*.expected"
    fi
}

wait_quiet
echo "run.sh: building targets (sanitizer $sanitizer, $CARGO_BUILD_JOBS job(s))" >&2
build_start=$(date +%s)
mkdir -p "$fuzz_dir/target"
build() { "${cargo[@]}" fuzz build "${build_flags[@]}" >"$fuzz_dir/target/build.log" 2>&1; }
# Cargo caches rustc's answers in target/.rustc_info.json, a refusal of
# -Z flags included: one build run without RUSTC_BOOTSTRAP poisons it.
if [ -n "${FUZZ_NO_BUILD:-}" ]; then
    echo "run.sh: FUZZ_NO_BUILD set: fuzzing the targets built before" >&2
elif ! build && ! { rm -f "$build_dir/.rustc_info.json" && build; }; then
    tail -30 "$fuzz_dir/target/build.log" >&2
    echo "run.sh: build failed (log: fuzz/target/build.log)" >&2
    exit 2
fi
echo "run.sh: built in $(($(date +%s) - build_start)) s" >&2

# Run the binaries just built, not `cargo fuzz run`, which would rebuild
# whenever src/ changes mid-campaign: every target fuzzes the same build.
bin_dir="$build_dir/x86_64-unknown-linux-gnu/release"
# Scratch files (the harness writes each input to disk) on tmpfs when there
# is one: about 3x the executions of a disk-backed folder.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    scratch_root=$(mktemp -d /dev/shm/safetensors-stream-fuzz.XXXXXX)
else
    scratch_root=$(mktemp -d "$fuzz_dir/target/scratch.XXXXXX")
fi
trap 'rm -rf "$scratch_root"' EXIT

logs="$fuzz_dir/artifacts/logs"
mkdir -p "$logs"
failed=0
artifacts() {
    find "$1" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l
}
printf '%-20s %12s %8s %10s %8s %8s %8s %8s %8s  %s\n' target executions seconds exec/s cov ft corpus rss crashes status
for t in "${targets[@]}"; do
    seed_all "$t"
    art="$fuzz_dir/artifacts/$t"
    mkdir -p "$art"
    before=$(artifacts "$art")
    # The harness leaves its scratch folder behind when libFuzzer exits.
    scratch="$scratch_root/$t"
    mkdir -p "$scratch"
    log="$logs/$t.log"
    : >"$log"
    # Runs in segments: a quiet window stops the fuzzer, and the target runs
    # again afterwards for the time it had left.
    left=$secs took=0 execs=0 rc=0
    while [ "$left" -gt 0 ]; do
        wait_quiet
        seg_log="$log.segment"
        start=$(date +%s)
        # shellcheck disable=SC2086
        TMPDIR="$scratch" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_odr_violation=0}" \
            "$bin_dir/$t" "$fuzz_dir/corpus/$t" \
            -max_total_time="$left" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
            -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_ARGS:-} >"$seg_log" 2>&1 &
        pid=$!
        stopped=0
        while kill -0 "$pid" 2>/dev/null; do
            if [ -e "$quiet_file" ]; then
                kill -INT "$pid" 2>/dev/null
                stopped=1
            fi
            sleep 2
        done
        wait "$pid"
        rc=$?
        ran=$(($(date +%s) - start))
        cat "$seg_log" >>"$log"
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$seg_log" | tail -1)
        [ -n "$n" ] || n=$(grep -a -o '^#[0-9]*' "$seg_log" | tail -1 | tr -d '#')
        execs=$((execs + ${n:-0}))
        took=$((took + ran))
        left=$((secs - took))
        if [ "$stopped" -eq 1 ]; then
            echo "run.sh: $t stopped by $quiet_file after $ran s; $left s left" >&2
            rc=0
            continue
        fi
        break
    done
    rm -f "$log.segment"
    rm -rf "$scratch"
    rate=$((execs / (took > 0 ? took : 1)))
    crashes=$(($(artifacts "$art") - before))
    ft=$(grep -a -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    rss=$(grep -a -o 'rss: [0-9]*Mb' "$log" | tail -1 | cut -d' ' -f2)
    cov=$(grep -a -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(grep -a -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    status=ok
    if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        status="FAILED (exit $rc; log fuzz/artifacts/logs/$t.log)"
        failed=1
    fi
    printf '%-20s %12s %8s %10s %8s %8s %8s %8s %8s  %s\n' "$t" "$execs" "$took" "$rate" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" "$crashes" "$status"
done
exit $failed
