//! An object replaced between planning and reading is refused, as a local
//! file that changes is: every ranged GET is pinned to the ETag seen when
//! the object was opened. Through the library, against a local S3 server
//! (moto); alone in its test binary because it sets the process's
//! environment, which the object store reads its configuration from.

#[path = "object_store/moto.rs"]
mod moto;

use safetensors_stream::convert::{convert_sources, open_inputs, ConvertOptions, Output};
use safetensors_stream::ErrorKind;

#[test]
fn an_object_replaced_after_planning_is_refused() {
    let Some(ep) = moto::server_or_skip("an_object_replaced_after_planning") else {
        return;
    };
    for (k, v) in moto::env(ep) {
        std::env::set_var(k, v);
    }
    let b = moto::bucket(ep, "etag");
    let original = std::fs::read("fixtures/example/model-input.safetensors").unwrap();
    moto::put(ep, &b, "m.safetensors", &original);
    let url = format!("s3://{b}/m.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let options = ConvertOptions {
        sync: false,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt
        .block_on(async {
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
