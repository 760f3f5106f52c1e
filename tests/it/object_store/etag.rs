//! An object replaced between planning and reading is refused, as a local
//! file that changes is: every ranged GET is pinned to the ETag seen when
//! the object was opened. Through the library, against a local S3 server
//! (moto). The object store reads its configuration from the process's
//! environment, which the other tests of this binary share: the test runs
//! again in a child of this binary, given the server's environment there.

use std::process::Command;

use crate::support::{block_on, fixtures, moto};
use safetensors_stream::convert::{convert_sources, open_inputs, ConvertOptions, Output};
use safetensors_stream::ErrorKind;

/// Set in the child that runs the test body.
const CHILD: &str = "SAFETENSORS_STREAM_TEST_ETAG_CHILD";

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn an_object_replaced_after_planning_is_refused() {
    let ep = moto::server("an_object_replaced_after_planning");
    if std::env::var_os(CHILD).is_none() {
        in_a_child(ep, "an_object_replaced_after_planning_is_refused");
        return;
    }
    let b = moto::bucket(ep, "etag");
    let original = std::fs::read(fixtures().join("example/model-input.safetensors")).unwrap();
    moto::put(ep, &b, "m.safetensors", &original);
    let url = format!("s3://{b}/m.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let options = ConvertOptions::default().sync(false);
    let e = block_on(async {
        let mut sources = open_inputs(&[url.clone().into()], &options).await?;
        // Same length, one data byte different: only the ETag tells.
        let mut replaced = original.clone();
        *replaced.last_mut().unwrap() ^= 1;
        moto::put(ep, &b, "m.safetensors", &replaced);
        convert_sources(&mut sources, &Output::File(out.clone()), &options).await
    })
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InputModified), "{e:?}");
    assert_eq!(e.input(), Some(url.as_str()));
    assert!(!out.exists());
}

/// Runs `test` of this module alone in a child of this test binary, with
/// the object store's configuration for `endpoint` in its environment.
fn in_a_child(endpoint: &str, test: &str) {
    // `it::object_store::etag` -> `object_store::etag::TEST`, as libtest names it.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{test}");
    let o = Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--ignored", "--test-threads=1"])
        .envs(moto::env(endpoint))
        // The same server, not one of the child's own.
        .env("SAFETENSORS_STREAM_S3_ENDPOINT", endpoint)
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("1 passed"),
        "{name} in a child: {stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
