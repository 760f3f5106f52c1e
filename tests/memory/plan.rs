//! What a plan holds once made: a fan-out worker (`--shard K`) keeps one
//! shard's plan through its copy, not every shard's
//! ([`Plan::keep_only`](safetensors_stream::plan::Plan::keep_only)).

use safetensors_stream::convert::Part;
use safetensors_stream::header::TensorMeta;
use safetensors_stream::plan::{plan, PlanOptions};
use safetensors_stream::source::Listing;
use safetensors_stream::Dtype;

use crate::alloc::{live, serial};

#[test]
fn a_shard_worker_keeps_one_shard_of_the_plan() {
    let _serial = serial();
    const TENSORS: usize = 20_000;
    const SHARDS: usize = 10;
    let input = Listing {
        input: "model.safetensors".into(),
        tensors: (0..TENSORS)
            .map(|i| {
                TensorMeta::new(
                    format!("model.layers.{i}.mlp.experts.weight"),
                    Dtype::U8,
                    [64],
                )
            })
            .collect(),
        metadata: None,
    };
    let options = PlanOptions::default().max_shard_size(Some((TENSORS / SHARDS * 64) as u64));
    let inputs = [input];
    let before = live();
    let mut planned = plan(&inputs, &options).expect("plans");
    assert_eq!(planned.shards.len(), SHARDS);
    // Every shard's header bytes, as the plan id makes them.
    planned
        .shards
        .iter()
        .for_each(|s| assert!(!s.header.bytes().is_empty()));
    let whole = live() - before;
    planned.keep_only(Part::Shard(4));
    let kept = live() - before;
    eprintln!("plan of {TENSORS} tensors in {SHARDS} shards: {whole} B, a worker keeps {kept} B");
    assert_eq!(planned.tensor_count(), TENSORS / SHARDS);
    // One shard of ten, and a few bytes for each empty shell.
    assert!(kept * SHARDS < whole * 3 / 2, "kept {kept} of {whole} B");
    // The whole run and the index step keep everything.
    for part in [Part::All, Part::IndexOnly] {
        let mut all = plan(&inputs, &options).expect("plans");
        all.keep_only(part);
        assert_eq!(all.tensor_count(), TENSORS);
    }
}
