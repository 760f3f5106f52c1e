//! Object storage through the binary, against a local S3 server (moto):
//! outputs and inputs byte-identical to local runs, a fan-out of parallel
//! `--shard K` processes, SIGTERM mid-upload, missing buckets.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{self, fixtures, listing, moto, pattern, stderr, BIN};

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

fn convert(endpoint: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    c.envs(moto::env(endpoint)).stdin(Stdio::null());
    for a in args {
        c.arg(a);
    }
    c.output().unwrap()
}

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
}

/// A raw dump of `len` bytes in `dir` (not all equal: parts must line up).
fn dump(dir: &Path, len: usize) -> PathBuf {
    support::write(dir, "big.bin", &pattern(14, len))
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn s3_output_and_input_are_byte_identical_to_local_runs() {
    let ep = moto::server("s3_output_and_input");
    let b = moto::bucket(ep, "io");
    let dir = tempfile::tempdir().unwrap();
    // 12 MiB: a multipart upload of 8 MiB parts; the npz: a single PUT.
    let big = dump(dir.path(), 12 << 20);
    let raw = [
        "--raw-dtype",
        "U8",
        "--raw-shape",
        "12582912",
        "--name",
        "w",
    ];
    let npz_input = fixture("example/model.npz");
    let cases: Vec<(&str, Vec<&dyn AsRef<std::ffi::OsStr>>)> = vec![
        (
            "big",
            vec![&big, &raw[0], &raw[1], &raw[2], &raw[3], &raw[4], &raw[5]],
        ),
        ("npz", vec![&npz_input as &dyn AsRef<_>]),
    ];
    for (name, inputs) in cases {
        let local = dir.path().join(format!("{name}.safetensors"));
        let url = format!("s3://{b}/dir/{name}.safetensors");
        let mut args = inputs.clone();
        args.extend([&"-o" as &dyn AsRef<_>, &local, &"--no-sync"]);
        ok(&convert(ep, &args));
        let mut args = inputs.clone();
        args.extend([&"-o" as &dyn AsRef<_>, &url]);
        let o = convert(ep, &args);
        ok(&o);
        assert!(stderr(&o).contains(&url), "{}", stderr(&o));
        let want = std::fs::read(&local).unwrap();
        let got = moto::get(ep, &b, &format!("dir/{name}.safetensors")).unwrap();
        assert!(
            got == want,
            "{name}: the object differs from the local file"
        );

        // And back: read by ranges from the object.
        let back = dir.path().join(format!("{name}-back.safetensors"));
        ok(&convert(ep, &[&url, &"-o", &back, &"--no-sync"]));
        assert!(
            std::fs::read(&back).unwrap() == want,
            "{name}: read back differs"
        );
    }
    // A non-safetensors object is streamed whole, as standard input is.
    let npz = format!("s3://{b}/model.npz");
    let local_npz = std::fs::read(fixture("example/model.npz")).unwrap();
    let staged = dir.path().join("model.npz");
    std::fs::write(&staged, &local_npz).unwrap();
    // (Uploaded raw by a plain PUT of the test's own: no conversion.)
    moto::put(ep, &b, "model.npz", &local_npz);
    let from_npz = dir.path().join("from-npz.safetensors");
    ok(&convert(ep, &[&npz, &"-o", &from_npz, &"--no-sync"]));
    assert_eq!(
        std::fs::read(&from_npz).unwrap(),
        std::fs::read(fixture("example/model.safetensors")).unwrap()
    );
    assert!(moto::open_uploads(ep, &b).is_empty());

    // inspect and validate read headers by ranges.
    let url = format!("s3://{b}/dir/npz.safetensors");
    let o = convert(ep, &[&"validate", &url]);
    ok(&o);
    let o = convert(ep, &[&"inspect", &"--json", &url]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tensors"], 5, "{v}");
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn parallel_shard_workers_and_the_index_equal_one_local_run() {
    let ep = moto::server("parallel_shard_workers");
    let b = moto::bucket(ep, "fan");
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("reference/all_dtypes.safetensors");
    let split = ["--max-shard-size", "100"];
    ok(&convert(
        ep,
        &[
            &input,
            &split[0],
            &split[1],
            &"-o",
            &dir.path().join("model.safetensors"),
            &"--no-sync",
        ],
    ));
    let files = listing(dir.path());
    let n = files.len() - 1;
    let url = format!("s3://{b}/model.safetensors");

    // The index refuses while shards are missing.
    let o = convert(
        ep,
        &[&input, &split[0], &split[1], &"-o", &url, &"--index-only"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("00001-of-"), "{}", stderr(&o));

    let workers: Vec<_> = (1..=n)
        .map(|k| {
            Command::new(BIN)
                .envs(moto::env(ep))
                .arg(&input)
                .args(split)
                .args(["--shard", &k.to_string(), "-o", &url, "--quiet"])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut w in workers {
        assert!(w.wait().unwrap().success());
    }
    assert_eq!(moto::keys(ep, &b).len(), n, "no index before --index-only");
    ok(&convert(
        ep,
        &[&input, &split[0], &split[1], &"-o", &url, &"--index-only"],
    ));
    assert_eq!(moto::keys(ep, &b), files);
    for f in &files {
        let want = std::fs::read(dir.path().join(f)).unwrap();
        assert!(moto::get(ep, &b, f).unwrap() == want, "{f} differs");
    }
    assert!(moto::open_uploads(ep, &b).is_empty());

    // The set read back through its index object: the original file.
    let back = dir.path().join("back.safetensors");
    let index = format!("s3://{b}/model.safetensors.index.json");
    ok(&convert(ep, &[&index, &"-o", &back, &"--no-sync"]));
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&input).unwrap());
    ok(&convert(ep, &[&"validate", &index]));
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn sigterm_mid_upload_leaves_no_object_and_no_open_upload() {
    let ep = moto::server("sigterm_mid_upload");
    let b = moto::bucket(ep, "term");
    let url = format!("s3://{b}/x.safetensors");
    let total = 40usize << 20;
    let mut child = Command::new(BIN)
        .envs(moto::env(ep))
        .args(["-", "--raw-dtype", "U8", "--raw-shape", &total.to_string()])
        .args(["--name", "x", "-o", &url, "--quiet"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Two parts' worth: a part is sent, the upload is open.
    stdin.write_all(&vec![7u8; 16 << 20]).unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while moto::open_uploads(ep, &b).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(moto::open_uploads(ep, &b).len(), 1, "the upload started");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let o = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    assert!(moto::open_uploads(ep, &b).is_empty(), "aborted");
    assert!(moto::keys(ep, &b).is_empty(), "no object");
}

/// Writing to, reading from and validating in `bucket` are each refused
/// by the store: exit 3, one line naming the URL, no credential, no output.
fn refused_in_one_line(ep: &str, bucket: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let input = fixture("example/model.npz");
    let (to, from) = (
        format!("s3://{bucket}/o.safetensors"),
        format!("s3://{bucket}/i.safetensors"),
    );
    for args in [
        vec![&input as &dyn AsRef<std::ffi::OsStr>, &"-o", &to],
        vec![&from, &"-o", &out],
        vec![&"validate", &from],
    ] {
        let o = convert(ep, &args);
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        let text = stderr(&o);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.starts_with(&format!("safetensors-convert: s3://{bucket}/")),
            "{text}"
        );
        assert!(
            !text.contains(moto::SECRET),
            "no credential in messages: {text}"
        );
    }
    assert!(!out.exists());
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn a_missing_bucket_is_one_line_and_exit_3() {
    let ep = moto::server("a_missing_bucket");
    refused_in_one_line(ep, "no-such-bucket-here");
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn refused_credentials_are_one_line_and_exit_3() {
    let ep = moto::checking_credentials()
        .unwrap_or_else(|why| panic!("refused_credentials: no S3 test server: {why}"));
    refused_in_one_line(ep, "bucket");
}

/// `convert --dry-run --json`'s plan id for these arguments.
fn plan_id(ep: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let mut args = args.to_vec();
    args.extend([&"--dry-run" as &dyn AsRef<_>, &"--json"]);
    let o = convert(ep, &args);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["plan_id"].as_str().expect("plan_id").to_string()
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn the_index_refuses_shard_objects_recording_another_plan() {
    let ep = moto::server("shard_objects_recording_another_plan");
    let b = moto::bucket(ep, "plan");
    let mut bytes = std::fs::read(fixture("reference/all_dtypes.safetensors")).unwrap();
    moto::put(ep, &b, "in.safetensors", &bytes);
    let input = format!("s3://{b}/in.safetensors");
    let url = format!("s3://{b}/out/model.safetensors");
    let base: [&dyn AsRef<std::ffi::OsStr>; 5] = [&input, &"--max-shard-size", &"100", &"-o", &url];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        convert(ep, &args)
    };

    // Shard 1 under plan A.
    let a = plan_id(ep, &base);
    ok(&run(&["--shard", "1", "--expect-plan", &a]));
    let shards = moto::keys(ep, &b);
    let first = shards
        .iter()
        .find(|k| k.starts_with("out/"))
        .expect("shard 1")
        .clone();
    let n: usize = first
        .trim_end_matches(".safetensors")
        .rsplit("-of-")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 3, "{first}");

    // The input object replaced (same length, one byte changed: a new ETag),
    // then shards 2..N under plan B.
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    moto::put(ep, &b, "in.safetensors", &bytes);
    let bid = plan_id(ep, &base);
    assert_ne!(a, bid, "a new ETag, a new plan");
    for k in 2..=n {
        ok(&run(&["--shard", &k.to_string(), "--expect-plan", &bid]));
    }
    let o = run(&["--index-only", "--expect-plan", &bid]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let msg = stderr(&o);
    assert!(msg.contains(&first) && msg.contains(&a), "{msg}");
    assert!(
        !moto::keys(ep, &b)
            .iter()
            .any(|k| k.ends_with(".index.json")),
        "no index"
    );

    // Shard 1 again under B: the set commits.
    ok(&run(&["--shard", "1", "--expect-plan", &bid]));
    ok(&run(&["--index-only", "--expect-plan", &bid]));
    assert!(moto::keys(ep, &b)
        .iter()
        .any(|k| k.ends_with(".index.json")));
    assert!(moto::open_uploads(ep, &b).is_empty());
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn a_retried_shard_aborts_the_upload_its_killed_attempt_left_open() {
    let ep = moto::server("retried_shard_aborts");
    let b = moto::bucket(ep, "retry");
    let input = fixture("reference/all_dtypes.safetensors");
    let url = format!("s3://{b}/m/model.safetensors");
    let shard = |k: &str| {
        let args: [&dyn AsRef<std::ffi::OsStr>; 7] = [
            &input,
            &"--max-shard-size",
            &"100",
            &"--shard",
            &k,
            &"-o",
            &url,
        ];
        convert(ep, &args)
    };
    // Two attempts at shard 1 killed mid-upload, one at shard 2, and an
    // unrelated upload whose key shard 1's is a prefix of.
    let first = "m/model-00001-of-00004.safetensors";
    moto::start_upload(ep, &b, first);
    moto::start_upload(ep, &b, first);
    moto::start_upload(ep, &b, "m/model-00002-of-00004.safetensors");
    moto::start_upload(ep, &b, &format!("{first}.other"));
    assert_eq!(moto::open_uploads(ep, &b).len(), 4);

    ok(&shard("1"));
    let mut open = moto::open_uploads(ep, &b);
    open.sort();
    assert_eq!(
        open,
        [
            "m/model-00001-of-00004.safetensors.other",
            "m/model-00002-of-00004.safetensors"
        ],
        "shard 1's dead uploads aborted, no other"
    );

    // `convert uploads` lists what is left under a prefix, `--abort` aborts it.
    let o = convert(ep, &[&"uploads", &"--json", &format!("s3://{b}/m/")]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut listed: Vec<&str> = v["uploads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["key"].as_str().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, open);
    let o = convert(ep, &[&"uploads", &format!("s3://{b}/m/model-00002")]);
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("m/model-00002-of-00004.safetensors\t") && text.contains("1 uploads open"),
        "{text}"
    );
    assert_eq!(
        moto::open_uploads(ep, &b).len(),
        2,
        "listing aborts nothing"
    );
    let o = convert(ep, &[&"uploads", &"--abort", &format!("s3://{b}/")]);
    ok(&o);
    assert!(
        stdout_of(&o).contains("2 uploads aborted"),
        "{}",
        stdout_of(&o)
    );
    assert!(moto::open_uploads(ep, &b).is_empty());

    // Only s3:// lists uploads; anything else is a usage error.
    let o = convert(ep, &[&"uploads", &"gs://bucket/x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `convert` with only `env` (and PATH) in its environment.
fn convert_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn no_credentials_at_all_is_one_line_at_once() {
    let input = fixture("example/model.npz");
    let input = input.to_str().unwrap();
    // Nothing answers at this metadata endpoint: there are no credentials.
    let env = [
        ("AWS_REGION", "us-east-1"),
        ("AWS_METADATA_ENDPOINT", "http://127.0.0.1:1"),
    ];
    for (args, side) in [
        (vec![input, "-o", "s3://b/out.safetensors"], "output"),
        (vec!["s3://b/in.safetensors", "-o", "/dev/null"], "input"),
    ] {
        let started = std::time::Instant::now();
        let mut with_report = args.clone();
        with_report.extend(["--report", "json"]);
        let o = convert_with(&env, &with_report);
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("no credentials: set AWS_ACCESS_KEY_ID"),
            "{msg}"
        );
        assert!(
            v["error"][side].as_str().unwrap().starts_with("s3://b/"),
            "{v}"
        );
        let other = if side == "input" { "output" } else { "input" };
        assert!(v["error"][other].is_null(), "{v}");
        let o = convert_with(&env, &args);
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
}

#[test]
fn a_plain_http_endpoint_without_allow_http_says_what_to_set() {
    let env = [
        ("AWS_ACCESS_KEY_ID", "a"),
        ("AWS_SECRET_ACCESS_KEY", "b"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
    ];
    let o = convert_with(&env, &["inspect", "s3://b/x.safetensors"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("set AWS_ALLOW_HTTP=true"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1);
}

#[test]
fn url_errors_at_the_output_are_reported_as_the_output() {
    let input = fixture("example/model.npz");
    for (url, kind) in [
        ("s4://bucket/x.safetensors", "usage"),
        ("s3://bucket/folder/", "usage"),
    ] {
        let o = convert_with(
            &[],
            &[input.to_str().unwrap(), "-o", url, "--report", "json"],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert_eq!(v["error"]["output"], url, "{v}");
        assert!(v["error"]["input"].is_null(), "{v}");
    }
    // A prefix as an input says folders are local only.
    let o = convert_with(&[], &["s3://bucket/folder/", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("folders work for local paths only"),
        "{}",
        stderr(&o)
    );
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn a_missing_output_bucket_is_reported_as_the_output() {
    let ep = moto::server("missing_output_bucket");
    let input = fixture("example/model.npz");
    let url = "s3://no-such-bucket-out/x.safetensors";
    let o = convert(ep, &[&input, &"-o", &url, &"--report", &"json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert_eq!(v["error"]["output"], url, "{v}");
    assert!(v["error"]["input"].is_null(), "{v}");
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn an_object_output_onto_a_shard_of_the_input_index_is_refused() {
    let ep = moto::server("object_output_onto_a_shard");
    let b = moto::bucket(ep, "shards");
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("reference/all_dtypes.safetensors");
    let local = dir.path().join("model.safetensors");
    ok(&convert(
        ep,
        &[
            &input,
            &"--max-shard-size",
            &"100",
            &"-o",
            &local,
            &"--no-sync",
        ],
    ));
    for f in listing(dir.path()) {
        moto::put(ep, &b, &f, &std::fs::read(dir.path().join(&f)).unwrap());
    }
    let index = format!("s3://{b}/model.safetensors.index.json");
    let shard = format!(
        "s3://{b}/model-00002-of-{:05}.safetensors",
        listing(dir.path()).len() - 1
    );
    let before = moto::get(ep, &b, shard.rsplit('/').next().unwrap()).unwrap();
    // The index's shards are what its source read: each is an input,
    // however the URL spells it (they were compared as text: a query or
    // an escaped dot replaced the shard).
    let spellings = [
        shard.clone(),
        format!("{shard}?v=1"),
        format!("{shard}#f"),
        shard.replacen("s3://", "S3://", 1),
        shard.replacen(".safetensors", "%2Esafetensors", 1),
    ];
    for (out, dry) in spellings
        .iter()
        .flat_map(|s| [(s, None), (s, Some("--dry-run"))])
    {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&index, &"--report", &"json", &"-o", out];
        if let Some(x) = &dry {
            args.push(x);
        }
        let o = convert(ep, &args);
        assert_eq!(o.status.code(), Some(2), "{out} {dry:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
        assert_eq!(v["error"]["kind"], "output_is_input", "{v}");
    }
    let after = moto::get(ep, &b, shard.rsplit('/').next().unwrap()).unwrap();
    assert!(after == before, "the shard object was replaced");
    assert!(moto::open_uploads(ep, &b).is_empty());

    // The plan id follows every object read: a shard put again (a new
    // ETag, the same bytes) changes it.
    let out = dir.path().join("out.safetensors");
    let id = || plan_id(ep, &[&index, &"-o", &out]);
    let first = id();
    assert_eq!(id(), first);
    let mut changed = before.clone();
    *changed.last_mut().unwrap() ^= 1;
    moto::put(ep, &b, shard.rsplit('/').next().unwrap(), &changed);
    assert_ne!(id(), first);
}
