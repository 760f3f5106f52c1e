//! An object replaced between planning and reading is refused, as a local
//! file that changes is: every ranged GET is pinned to the ETag seen when
//! the object was opened. Through the library, against a local S3 server
//! (moto); alone in its test binary because it sets the process's
//! environment, which the object store reads its configuration from.

mod support;

use safetensors_stream::convert::{convert_sources, open_inputs, ConvertOptions, Output};
use safetensors_stream::ErrorKind;
use support::{block_on, fixtures, moto};

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn an_object_replaced_after_planning_is_refused() {
    let ep = moto::server("an_object_replaced_after_planning");
    for (k, v) in moto::env(ep) {
        std::env::set_var(k, v);
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
