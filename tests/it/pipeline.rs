//! The streaming pipeline end to end, through the library call `convert`:
//! round trips of the reference fixtures, merging, ordering, the planner's
//! options, duplicate names, and sharded output read back by the reference.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use safetensors_stream::convert::{
    convert, convert_sources, dry_run, open_inputs, ConvertOptions, Output,
};
use safetensors_stream::header::{encode, Order, Rules, TensorMeta};
use safetensors_stream::index::Checkpoint;
use safetensors_stream::internals::write_shard;
use safetensors_stream::location::{Identity, Location, Opened};
use safetensors_stream::plan::{plan, PlanOptions};
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::MemorySource;
use safetensors_stream::source::{Listing, Source};
use safetensors_stream::{Category, Dtype, ErrorKind, HeaderError};
use support::pipeline::*;

fn opts(plan: PlanOptions) -> ConvertOptions {
    ConvertOptions::default().plan(plan).sync(false)
}

fn run(
    inputs: &[PathBuf],
    out: &Path,
    o: &ConvertOptions,
) -> safetensors_stream::Result<safetensors_stream::convert::Report> {
    block_on(convert(inputs, &Output::File(out.to_path_buf()), o))
}

/// Writes `tensors` with the reference writer into `dir/name`.
fn ref_file(dir: &Path, name: &str, tensors: &[T], md: Option<&[(&str, &str)]>) -> PathBuf {
    write(dir, name, &ref_serialize(tensors, md))
}

/// The tensors of a reference-readable file, as `T`s.
fn tensors_of(bytes: &[u8]) -> Vec<T> {
    ref_read(bytes, "input")
        .into_iter()
        .map(|(name, (dtype, shape, data))| T {
            name,
            dtype: dtype.parse().unwrap(),
            shape: shape.into_iter().map(|d| d as u64).collect(),
            data,
        })
        .collect()
}

// ---- round trips -------------------------------------------------------------

#[test]
fn every_reference_fixture_round_trips_to_identical_bytes() {
    let files = reference_files();
    assert!(files.len() >= 30, "fixtures missing: {files:?}");
    let dir = tempfile::tempdir().unwrap();
    for (i, input) in files.iter().enumerate() {
        let original = std::fs::read(input).unwrap();
        let out = dir.path().join(format!("out{i}.safetensors"));
        // spec_empty.safetensors holds no tensor.
        let allow_empty = PlanOptions::default().allow_empty(true);
        let report = run(std::slice::from_ref(input), &out, &opts(allow_empty))
            .unwrap_or_else(|e| panic!("{}: {e}", input.display()));
        let got = std::fs::read(&out).unwrap();
        assert!(
            got == original,
            "{}: output differs from the input",
            input.display()
        );
        let cp = Checkpoint::open(input, Rules::REFERENCE).unwrap();
        assert_eq!(report.tensors, cp.tensor_count(), "{}", input.display());
        assert_eq!(report.data_bytes, cp.data_len(), "{}", input.display());
        assert_eq!(report.outputs.len(), 1);
        assert_eq!(report.outputs[0].bytes, original.len() as u64);
        assert_eq!(report.outputs[0].tensors, cp.tensor_count());
        assert_eq!(report.inputs, [input.display().to_string()]);
    }
    // Only the outputs: no temp file left behind.
    assert_eq!(listing(dir.path()).len(), files.len());
}

#[test]
fn round_trip_with_fsync_on() {
    // The default options (sync on) take the same path plus fsyncs.
    let input = fixtures().join("example/model-input.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    run(
        std::slice::from_ref(&input),
        &out,
        &ConvertOptions::default(),
    )
    .unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
    assert_eq!(listing(dir.path()), ["m.safetensors"]);
}

#[test]
fn an_existing_output_is_replaced() {
    let input = fixtures().join("reference/mixed.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let out = write(
        dir.path(),
        "out.safetensors",
        b"old bytes, longer than nothing at all",
    );
    run(
        std::slice::from_ref(&input),
        &out,
        &opts(PlanOptions::default()),
    )
    .unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

// ---- merging -------------------------------------------------------------------

#[test]
fn merging_two_fixtures_equals_the_reference_serialization_of_the_union() {
    let a = fixtures().join("reference/spec_four.safetensors"); // metadata {"format":"np"}
    let b = fixtures().join("reference/all_dtypes.safetensors");
    let mut union = tensors_of(&std::fs::read(&a).unwrap());
    union.extend(tensors_of(&std::fs::read(&b).unwrap()));
    let expected = ref_serialize(&union, Some(&[("format", "np")]));
    let dir = tempfile::tempdir().unwrap();
    for (inputs, name) in [(vec![a.clone(), b.clone()], "ab"), (vec![b, a], "ba")] {
        let out = dir.path().join(format!("{name}.safetensors"));
        let report = run(&inputs, &out, &opts(PlanOptions::default())).unwrap();
        assert!(std::fs::read(&out).unwrap() == expected, "{name}");
        assert_eq!(report.tensors, union.len());
    }
}

#[test]
fn merging_built_files_equals_the_reference_serialization_of_the_union() {
    let a = vec![
        T::new("layer.0.weight", Dtype::F32, &[4, 3]),
        T::new("layer.0.bias", Dtype::F32, &[3]),
        T::new("emb", Dtype::BF16, &[5, 2]),
        T::new("flags", Dtype::BOOL, &[7]),
    ];
    let b = vec![
        T::new("layer.1.weight", Dtype::F16, &[3, 3]),
        T::new("step", Dtype::I64, &[]),
        T::new("empty", Dtype::F64, &[0, 4]),
        T::new("q", Dtype::F8_E4M3, &[9]),
        T::new("c", Dtype::C64, &[2]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let pa = ref_file(dir.path(), "a.safetensors", &a, Some(&[("format", "pt")]));
    let pb = ref_file(dir.path(), "b.safetensors", &b, None);
    let out = dir.path().join("merged.safetensors");
    run(&[pa, pb], &out, &opts(PlanOptions::default())).unwrap();
    let union: Vec<T> = a.iter().chain(&b).cloned().collect();
    assert!(std::fs::read(&out).unwrap() == ref_serialize(&union, Some(&[("format", "pt")])));
}

fn arb_dtype() -> impl Strategy<Value = Dtype> {
    proptest::sample::select(Dtype::ALL.to_vec())
}

fn arb_tensors() -> impl Strategy<Value = Vec<(T, bool)>> {
    let name = proptest::string::string_regex("[ab._0-9é🙂]{0,6}").unwrap();
    let one = (
        name,
        arb_dtype(),
        proptest::collection::vec(0u64..4, 0..3),
        any::<bool>(),
        any::<u64>(),
    );
    proptest::collection::vec(one, 0..10).prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        v.into_iter()
            .filter(|(n, ..)| seen.insert(n.clone()))
            .map(|(name, dtype, mut shape, side, seed)| {
                if dtype.bits() < 8 {
                    shape.push(8); // whole bytes for F4 and F6
                }
                let len = dtype.byte_len(&shape).unwrap() as usize;
                let t = T {
                    name,
                    dtype,
                    shape,
                    data: pattern(seed, len),
                };
                (t, side)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any split of any tensors over two in-memory sources merges to the
    /// reference's bytes for the union (the library layer, no files).
    #[test]
    fn any_two_sources_merge_to_the_reference_bytes(tensors in arb_tensors(), md in any::<bool>()) {
        let mut a = MemorySource::new("a");
        let mut b = MemorySource::new("b");
        for (t, side) in &tensors {
            let s = if *side { &mut a } else { &mut b };
            s.push(t.name.clone(), t.dtype, t.shape.clone(), t.data.clone()).unwrap();
        }
        let metadata: Option<&[(&str, &str)]> = if md { Some(&[("k", "v")]) } else { None };
        if md {
            b.set_metadata(Some(BTreeMap::from([("k".to_string(), "v".to_string())])));
        }
        let mut sources: Vec<Box<dyn Source>> = vec![Box::new(a), Box::new(b)];
        let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
        let p = plan(&listings, &PlanOptions::default().allow_empty(true)).unwrap();
        prop_assert_eq!(p.shards.len(), 1);
        let opts = SinkOptions::default().buffer_size(5);
        let got = block_on(write_shard(Vec::new(), &p.shards[0], &mut sources, opts, "-")).unwrap();
        let all: Vec<T> = tensors.into_iter().map(|(t, _)| t).collect();
        prop_assert_eq!(got, ref_serialize(&all, metadata));
    }
}

// ---- order ---------------------------------------------------------------------

#[test]
fn input_order_gives_a_valid_file_in_the_inputs_order() {
    let a = vec![
        T::new("z", Dtype::U8, &[3]),
        T::new("y", Dtype::F64, &[2]),
        T::new("x", Dtype::BOOL, &[5]),
    ];
    let b = vec![T::new("m", Dtype::I16, &[4]), T::new("a", Dtype::F32, &[1])];
    let dir = tempfile::tempdir().unwrap();
    // The reference writer would reorder; lay the inputs out in our order by writing them as given.
    let pa = dir.path().join("a.safetensors");
    let pb = dir.path().join("b.safetensors");
    for (p, ts) in [(&pa, &a), (&pb, &b)] {
        let mut src = MemorySource::new("x");
        for t in ts.iter() {
            src.push(t.name.clone(), t.dtype, t.shape.clone(), t.data.clone())
                .unwrap();
        }
        let mut s: Vec<Box<dyn Source>> = vec![Box::new(src)];
        let o = opts(PlanOptions::default().order(Order::AsGiven));
        block_on(convert_sources(&mut s, &Output::File(p.clone()), &o)).unwrap();
    }
    assert_eq!(
        names_in_offset_order(&std::fs::read(&pa).unwrap()),
        ["z", "y", "x"]
    );

    let out = dir.path().join("ordered.safetensors");
    let o = opts(PlanOptions::default().order(Order::AsGiven));
    run(&[pa.clone(), pb.clone()], &out, &o).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let union: Vec<T> = a.iter().chain(&b).cloned().collect();
    assert_eq!(
        ref_read(&bytes, "the --order input output"),
        expected_tensors(&union)
    );
    assert_eq!(names_in_offset_order(&bytes), ["z", "y", "x", "m", "a"]);
    assert!(
        bytes != ref_serialize(&union, None),
        "input order should differ from canonical here"
    );
    Checkpoint::open(&out, Rules::STRICT).unwrap();

    // The default is canonical again: converting the ordered file gives the reference's bytes.
    let canon = dir.path().join("canon.safetensors");
    run(&[out], &canon, &opts(PlanOptions::default())).unwrap();
    assert!(std::fs::read(&canon).unwrap() == ref_serialize(&union, None));
}

// ---- include, exclude, rename, prefix, metadata ---------------------------------

fn model_tensors() -> Vec<T> {
    vec![
        T::new("layer.0.weight", Dtype::F32, &[2, 3]),
        T::new("layer.0.bias", Dtype::F32, &[3]),
        T::new("layer.1.weight", Dtype::F16, &[4]),
        T::new("layer.1.bias", Dtype::F16, &[4]),
        T::new("opt.state", Dtype::U8, &[5]),
    ]
}

fn pick(ts: &[T], name: &str, new_name: &str) -> T {
    let mut t = ts.iter().find(|t| t.name == name).unwrap().clone();
    t.name = new_name.to_string();
    t
}

#[test]
fn include_exclude_rename_prefix_and_metadata() {
    let ts = model_tensors();
    let dir = tempfile::tempdir().unwrap();
    let input = ref_file(dir.path(), "in.safetensors", &ts, Some(&[("source", "x")]));
    let out = dir.path().join("out.safetensors");
    let o = opts(
        PlanOptions::default()
            .include(vec!["layer.*".into()])
            .exclude(vec!["*.bias".into()])
            .renames(vec![("layer.1.weight".into(), "head.weight".into())])
            .prefix(Some("model.".into()))
            .metadata(vec![
                ("source".into(), "override".into()),
                ("extra".into(), "1".into()),
            ]),
    );
    let report = run(std::slice::from_ref(&input), &out, &o).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let expected = [
        pick(&ts, "layer.0.weight", "model.layer.0.weight"),
        pick(&ts, "layer.1.weight", "model.head.weight"),
    ];
    assert_eq!(ref_read(&bytes, "filtered"), expected_tensors(&expected));
    assert_eq!(report.tensors, 2);
    assert_eq!(report.data_bytes, 24 + 8);
    let md = ref_metadata(&bytes).unwrap();
    assert_eq!(
        md,
        BTreeMap::from([
            ("extra".into(), "1".into()),
            ("source".into(), "override".into())
        ])
    );
    // Strict validity, and our metadata keys are written sorted.
    Checkpoint::open(&out, Rules::STRICT).unwrap();
    let text = String::from_utf8_lossy(&bytes[8..]).into_owned();
    assert!(
        text.starts_with(r#"{"__metadata__":{"extra":"1","source":"override"},"#),
        "{text}"
    );

    // With a single metadata key the bytes are the reference's.
    let o = opts(
        PlanOptions::default()
            .exclude(vec!["opt.*".into(), "layer.1.*".into()])
            .metadata(vec![("source".into(), "y".into())]),
    );
    run(std::slice::from_ref(&input), &out, &o).unwrap();
    let kept = [
        pick(&ts, "layer.0.weight", "layer.0.weight"),
        pick(&ts, "layer.0.bias", "layer.0.bias"),
    ];
    assert!(std::fs::read(&out).unwrap() == ref_serialize(&kept, Some(&[("source", "y")])));
}

#[test]
fn filters_match_input_names_not_output_names() {
    let ts = model_tensors();
    let dir = tempfile::tempdir().unwrap();
    let input = ref_file(dir.path(), "in.safetensors", &ts, None);
    let out = dir.path().join("out.safetensors");
    // The prefix comes after filtering: "model.*" matches no input name,
    // which is an error unless empty output is allowed.
    let filters = PlanOptions::default()
        .include(vec!["model.*".into()])
        .prefix(Some("model.".into()));
    let o = opts(filters.clone());
    let e = run(std::slice::from_ref(&input), &out, &o).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::NothingSelected(_)), "{e}");
    assert!(!out.exists());
    let o = opts(filters.allow_empty(true));
    let report = run(std::slice::from_ref(&input), &out, &o).unwrap();
    assert_eq!(report.tensors, 0);
    assert!(std::fs::read(&out).unwrap() == ref_serialize(&[], None));
    // Several include patterns are a union.
    let o = opts(PlanOptions::default().include(vec!["opt.*".into(), "*.0.bias".into()]));
    run(std::slice::from_ref(&input), &out, &o).unwrap();
    let kept = [
        pick(&ts, "opt.state", "opt.state"),
        pick(&ts, "layer.0.bias", "layer.0.bias"),
    ];
    assert!(std::fs::read(&out).unwrap() == ref_serialize(&kept, None));
}

#[test]
fn metadata_merges_in_input_order_then_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let a = ref_file(
        dir.path(),
        "a.safetensors",
        &[T::new("a", Dtype::U8, &[1])],
        Some(&[("k", "from-a")]),
    );
    let b = ref_file(
        dir.path(),
        "b.safetensors",
        &[T::new("b", Dtype::U8, &[1])],
        Some(&[("k", "from-b")]),
    );
    let out = dir.path().join("out.safetensors");
    run(&[a.clone(), b.clone()], &out, &opts(PlanOptions::default())).unwrap();
    assert_eq!(
        ref_metadata(&std::fs::read(&out).unwrap()).unwrap()["k"],
        "from-b"
    );
    run(&[b.clone(), a.clone()], &out, &opts(PlanOptions::default())).unwrap();
    assert_eq!(
        ref_metadata(&std::fs::read(&out).unwrap()).unwrap()["k"],
        "from-a"
    );
    let o = opts(PlanOptions::default().metadata(vec![("k".into(), "cli".into())]));
    run(&[a, b], &out, &o).unwrap();
    assert_eq!(
        ref_metadata(&std::fs::read(&out).unwrap()).unwrap()["k"],
        "cli"
    );
}

#[test]
fn bad_options_are_usage_errors_and_write_nothing() {
    let ts = model_tensors();
    let dir = tempfile::tempdir().unwrap();
    let input = ref_file(dir.path(), "in.safetensors", &ts, None);
    let out = dir.path().join("out.safetensors");
    let cases = [
        PlanOptions::default().renames(vec![("nope".into(), "x".into())]),
        // A rename of a tensor that the filters dropped names nothing.
        PlanOptions::default()
            .exclude(vec!["opt.*".into()])
            .renames(vec![("opt.state".into(), "x".into())]),
        PlanOptions::default().include(vec!["[".into()]),
        PlanOptions::default().exclude(vec!["a{".into()]),
    ];
    for o in cases {
        let e = run(std::slice::from_ref(&input), &out, &opts(o.clone())).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Usage(_)), "{o:?}: {e:?}");
        assert_eq!(e.category(), Category::Usage);
    }
    assert_eq!(listing(dir.path()), ["in.safetensors"]);
}

// ---- duplicate names -----------------------------------------------------------

#[test]
fn a_name_given_twice_across_inputs_names_both_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let a = ref_file(
        dir.path(),
        "first.safetensors",
        &[T::new("w", Dtype::F32, &[2]), T::new("x", Dtype::U8, &[1])],
        None,
    );
    let b = ref_file(
        dir.path(),
        "second.safetensors",
        &[T::new("w", Dtype::F16, &[3])],
        None,
    );
    let out = dir.path().join("out.safetensors");
    let e = run(&[a.clone(), b.clone()], &out, &opts(PlanOptions::default())).unwrap_err();
    match e.kind() {
        ErrorKind::Header(HeaderError::DuplicateTensor { name, inputs }) => {
            assert_eq!(name, "w");
            let (x, y) = inputs.clone().expect("both inputs are named");
            assert_eq!(
                (x.as_str(), y.as_str()),
                (
                    a.display().to_string().as_str(),
                    b.display().to_string().as_str()
                )
            );
        }
        k => panic!("expected DuplicateTensor, got {k:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("first.safetensors")
            && msg.contains("second.safetensors")
            && msg.contains("\"w\""),
        "{msg}"
    );
    assert_eq!(e.category(), Category::Usage);
    assert!(!out.exists());
    assert_eq!(
        listing(dir.path()),
        ["first.safetensors", "second.safetensors"]
    );

    // A prefix does not resolve it (both get it); excluding the name does.
    let o = opts(PlanOptions::default().prefix(Some("p.".into())));
    assert!(matches!(
        run(&[a.clone(), b.clone()], &out, &o).unwrap_err().kind(),
        ErrorKind::Header(HeaderError::DuplicateTensor { .. })
    ));
    let o = opts(PlanOptions::default().exclude(vec!["w".into()]));
    run(&[a.clone(), b.clone()], &out, &o).unwrap();
    // The same file twice is a duplicate too.
    let e = run(&[a.clone(), a.clone()], &out, &opts(PlanOptions::default())).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::DuplicateTensor { .. })
        ),
        "{e:?}"
    );
}

#[test]
fn a_rename_onto_an_existing_name_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let a = ref_file(
        dir.path(),
        "a.safetensors",
        &[T::new("x", Dtype::U8, &[1]), T::new("y", Dtype::U8, &[1])],
        None,
    );
    let out = dir.path().join("out.safetensors");
    let o = opts(PlanOptions::default().renames(vec![("x".into(), "y".into())]));
    let e = run(&[a], &out, &o).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::DuplicateTensor { name, .. }) if name == "y"),
        "{e:?}"
    );
    assert!(!out.exists());
}

#[test]
fn a_tensor_renamed_to_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = ref_file(
        dir.path(),
        "a.safetensors",
        &[T::new("x", Dtype::U8, &[1])],
        None,
    );
    let out = dir.path().join("out.safetensors");
    let o = opts(PlanOptions::default().renames(vec![("x".into(), "__metadata__".into())]));
    let e = run(&[a], &out, &o).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::ReservedName)),
        "{e:?}"
    );
    assert!(!out.exists());
}

// ---- sharding --------------------------------------------------------------------

/// All U8, so the canonical order is by name and sizes are byte counts.
fn shard_input() -> Vec<T> {
    [
        ("a", 40),
        ("b", 60),
        ("c", 150),
        ("d", 30),
        ("e", 70),
        ("f", 100),
        ("g", 1),
    ]
    .iter()
    .map(|(n, len)| T::new(n, Dtype::U8, &[*len]))
    .collect()
}

fn shard_name(base: &str, k: usize, n: usize) -> String {
    format!("{base}-{k:05}-of-{n:05}.safetensors")
}

#[test]
fn sharding_is_greedy_and_every_shard_and_the_index_load_with_the_reference() {
    let ts = shard_input();
    let src = tempfile::tempdir().unwrap();
    let input = ref_file(src.path(), "in.safetensors", &ts, Some(&[("format", "pt")]));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let o = opts(PlanOptions::default().max_shard_size(Some(100)));
    let report = run(std::slice::from_ref(&input), &out, &o).unwrap();

    // Greedy in canonical order: a+b is exactly 100 (allowed); c (150) alone;
    // d+e = 100; f = 100; g alone at the end.
    let groups: [&[&str]; 5] = [&["a", "b"], &["c"], &["d", "e"], &["f"], &["g"]];
    let n = groups.len();
    let mut expected_files: Vec<String> = (1..=n).map(|k| shard_name("model", k, n)).collect();
    expected_files.push("model.safetensors.index.json".into());
    assert_eq!(listing(dir.path()), expected_files);
    assert!(!out.exists(), "no plain file beside the shards");

    let mut weight_map = BTreeMap::new();
    let mut seen = RefTensors::new();
    for (k, group) in groups.iter().enumerate() {
        let file = shard_name("model", k + 1, n);
        let bytes = std::fs::read(dir.path().join(&file)).unwrap();
        let members: Vec<T> = group
            .iter()
            .map(|g| ts.iter().find(|t| t.name == *g).unwrap().clone())
            .collect();
        // Each shard is what the reference writes for its tensors, metadata included.
        assert!(
            bytes == ref_serialize(&members, Some(&[("format", "pt")])),
            "{file}"
        );
        let held = ref_read(&bytes, &file);
        assert_eq!(held, expected_tensors(&members), "{file}");
        for (name, v) in held {
            weight_map.insert(name.clone(), file.clone());
            assert!(seen.insert(name, v).is_none(), "a tensor in two shards");
        }
        assert_eq!(
            report.outputs[k].path,
            dir.path().join(&file).display().to_string()
        );
        assert_eq!(report.outputs[k].bytes, bytes.len() as u64);
        assert_eq!(report.outputs[k].tensors, group.len());
    }
    assert_eq!(
        seen,
        expected_tensors(&ts),
        "the shards hold exactly the input's tensors"
    );

    let index_path = dir.path().join("model.safetensors.index.json");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    assert_eq!(index["metadata"]["total_size"], 451);
    let wm: BTreeMap<String, String> = serde_json::from_value(index["weight_map"].clone()).unwrap();
    assert_eq!(wm, weight_map);
    assert_eq!(report.outputs.len(), n + 1);
    assert_eq!(report.outputs[n].path, index_path.display().to_string());
    assert_eq!(report.outputs[n].tensors, 0);
    assert_eq!((report.tensors, report.data_bytes), (7, 451));

    // The strict validator accepts the whole set.
    let cp = Checkpoint::open(&index_path, Rules::STRICT).unwrap();
    assert_eq!(
        (cp.tensor_count(), cp.data_len(), cp.files.len()),
        (7, 451, n)
    );

    // Read back: the index as an input gives the original file.
    let back = src.path().join("back.safetensors");
    run(&[index_path], &back, &opts(PlanOptions::default())).unwrap();
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&input).unwrap());
}

#[test]
fn sharding_a_fixture_and_reading_it_back_gives_the_original_bytes() {
    for fixture in [
        "reference/all_dtypes.safetensors",
        "reference/mixed.safetensors",
        "example/model-input.safetensors",
    ] {
        let input = fixtures().join(fixture);
        let original = std::fs::read(&input).unwrap();
        let total = Checkpoint::open(&input, Rules::STRICT).unwrap().data_len();
        for limit in [1, 8, total / 3 + 1, total - 1] {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("s.safetensors");
            let o = opts(PlanOptions::default().max_shard_size(Some(limit)));
            let report = run(std::slice::from_ref(&input), &out, &o).unwrap();
            let shards = report.outputs.len() - 1;
            assert!(shards >= 2, "{fixture} at {limit}");
            let index = dir.path().join("s.safetensors.index.json");
            let cp = Checkpoint::open(&index, Rules::STRICT).unwrap();
            assert_eq!(cp.data_len(), total);
            for (location, h) in &cp.files {
                let path = location.path().unwrap();
                let size: u64 = h.data_len();
                assert!(
                    size <= limit || h.tensors.len() == 1,
                    "{} over the limit",
                    path.display()
                );
                ref_read(&std::fs::read(path).unwrap(), &path.display().to_string());
            }
            let back = dir.path().join("back.safetensors");
            run(&[index], &back, &opts(PlanOptions::default())).unwrap();
            assert!(
                std::fs::read(&back).unwrap() == original,
                "{fixture} at {limit}"
            );
        }
    }
}

#[test]
fn empty_tensors_at_the_edges_of_shards_read_back_from_the_right_file() {
    // A sharded input's tensors are found by their file's first index, and
    // each ends where the next in its file starts: empty tensors at a
    // shard's start, middle and end test both.
    let ts: Vec<T> = [
        ("a", 0),
        ("b", 50),
        ("c", 0),
        ("d", 50),
        ("e", 0),
        ("f", 0),
        ("g", 50),
        ("h", 0),
    ]
    .iter()
    .map(|(n, len)| T::new(n, Dtype::U8, &[*len]))
    .collect();
    let src = tempfile::tempdir().unwrap();
    let input = ref_file(src.path(), "in.safetensors", &ts, None);
    let original = std::fs::read(&input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.safetensors");
    let report = run(
        &[input],
        &out,
        &opts(PlanOptions::default().max_shard_size(Some(50))),
    )
    .unwrap();
    assert_eq!(report.outputs.len(), 4, "three shards and the index");
    let index = dir.path().join("s.safetensors.index.json");
    let back = dir.path().join("back.safetensors");
    run(&[index], &back, &opts(PlanOptions::default())).unwrap();
    assert!(std::fs::read(&back).unwrap() == original);
}

#[test]
fn one_shard_is_a_plain_file_and_no_index() {
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let input = ref_file(dir.path(), "in.safetensors", &ts, None);
    for limit in [451, 452, u64::MAX] {
        let out_dir = tempfile::tempdir().unwrap();
        let out = out_dir.path().join("model.safetensors");
        let o = opts(PlanOptions::default().max_shard_size(Some(limit)));
        let report = run(std::slice::from_ref(&input), &out, &o).unwrap();
        assert_eq!(
            listing(out_dir.path()),
            ["model.safetensors"],
            "limit {limit}"
        );
        assert!(std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap());
        assert_eq!(report.outputs.len(), 1);
    }
    // No tensors at all: one empty file.
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("model.safetensors");
    let o = opts(
        PlanOptions::default()
            .max_shard_size(Some(10))
            .exclude(vec!["*".into()])
            .allow_empty(true),
    );
    run(std::slice::from_ref(&input), &out, &o).unwrap();
    assert_eq!(listing(out_dir.path()), ["model.safetensors"]);
    assert!(std::fs::read(&out).unwrap() == ref_serialize(&[], None));
}

#[test]
fn sharding_in_input_order_keeps_the_input_order_across_shards() {
    let ts = vec![
        T::new("z", Dtype::U8, &[30]),
        T::new("y", Dtype::F64, &[5]),
        T::new("x", Dtype::BOOL, &[30]),
        T::new("w", Dtype::I32, &[10]),
        T::new("v", Dtype::U8, &[10]),
    ];
    let mut src = MemorySource::new("mem");
    for t in &ts {
        src.push(t.name.clone(), t.dtype, t.shape.clone(), t.data.clone())
            .unwrap();
    }
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(src)];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = opts(
        PlanOptions::default()
            .max_shard_size(Some(70))
            .order(Order::AsGiven),
    );
    block_on(convert_sources(&mut sources, &Output::File(out), &o)).unwrap();
    // z30+y40 = 70; x30+w40 = 70; v10.
    let mut order = Vec::new();
    for k in 1..=3 {
        let bytes = std::fs::read(dir.path().join(shard_name("m", k, 3))).unwrap();
        ref_read(&bytes, "shard");
        order.extend(names_in_offset_order(&bytes));
    }
    assert_eq!(order, ["z", "y", "x", "w", "v"]);
    Checkpoint::open(&dir.path().join("m.safetensors.index.json"), Rules::STRICT).unwrap();
}

#[test]
fn an_index_named_output_and_a_base_without_extension() {
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let input = ref_file(dir.path(), "in.safetensors", &ts, None);
    let o = opts(PlanOptions::default().max_shard_size(Some(250)));
    // a,b,c = 250 | d,e,f,g = 201
    // The index's own name, or a base the shards and index are named after.
    let sharded = |output: &str, base: &str| {
        let out_dir = tempfile::tempdir().unwrap();
        run(
            std::slice::from_ref(&input),
            &out_dir.path().join(output),
            &o,
        )
        .unwrap();
        let index = format!("{base}.safetensors.index.json");
        let want = [shard_name(base, 1, 2), shard_name(base, 2, 2), index];
        assert_eq!(listing(out_dir.path()), want, "{output}");
        out_dir
    };
    sharded("m.safetensors.index.json", "m");
    let out_dir = sharded("model", "model");
    Checkpoint::open(
        &out_dir.path().join("model.safetensors.index.json"),
        Rules::STRICT,
    )
    .unwrap();
}

// ---- the planner's sharding, as a property ----------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The shards are the canonical order cut greedily: no shard over the
    /// limit unless it is one tensor alone, and every cut is forced (the next
    /// tensor would not have fit).
    #[test]
    fn shards_are_the_plan_order_cut_greedily(
        sizes in proptest::collection::vec((0u64..120, arb_dtype()), 0..14),
        limit in 1u64..200,
    ) {
        let metas: Vec<TensorMeta> = sizes
            .iter()
            .enumerate()
            .map(|(i, (n, d))| {
                let n = if d.bits() < 8 { n * 8 } else { *n };
                TensorMeta::new(format!("t{i}"), *d, [n])
            })
            .collect();
        let listing = Listing { input: "in".into(), tensors: metas.clone(), metadata: None };
        let p = plan(&[listing], &PlanOptions::default().max_shard_size(Some(limit)).allow_empty(true)).unwrap();
        let canonical: Vec<(String, u64)> = encode(metas, None, Order::Canonical)
            .unwrap()
            .header()
            .tensors
            .iter()
            .map(|t| (t.meta.name.clone(), t.len()))
            .collect();
        let shards: Vec<Vec<(String, u64)>> = p
            .shards
            .iter()
            .map(|s| s.header.header().tensors.iter().map(|t| (t.meta.name.clone(), t.len())).collect())
            .collect();
        let flat: Vec<(String, u64)> = shards.concat();
        prop_assert_eq!(&flat, &canonical);
        prop_assert_eq!(p.tensor_count(), canonical.len());
        prop_assert_eq!(p.data_len(), canonical.iter().map(|t| t.1).sum::<u64>());
        let sum = |s: &[(String, u64)]| s.iter().map(|t| t.1).sum::<u64>();
        for (i, s) in shards.iter().enumerate() {
            prop_assert!(!s.is_empty() || shards.len() == 1, "an empty shard");
            prop_assert!(sum(s) <= limit || s.len() == 1, "shard {} over the limit", i);
            if let Some(next) = shards.get(i + 1) {
                prop_assert!(sum(s) + next[0].1 > limit, "shard {} closed early", i);
            }
            // Every shard's header is canonical on its own (the reference's bytes).
            let own = encode(
                p.shards[i].header.header().tensors.iter().map(|t| t.meta.clone()).collect(),
                None,
                Order::Canonical,
            ).unwrap();
            prop_assert_eq!(own.bytes(), p.shards[i].header.bytes());
        }
    }
}

// ---- writing over the inputs ------------------------------------------------------

/// Options that allow the output to replace an input.
fn overwriting(plan: PlanOptions) -> ConvertOptions {
    opts(plan).overwrite_input(true)
}

#[test]
fn converting_a_file_onto_itself_works() {
    let ts = model_tensors();
    let dir = tempfile::tempdir().unwrap();
    let path = ref_file(dir.path(), "m.safetensors", &ts, None);
    let before = std::fs::read(&path).unwrap();
    let plan = PlanOptions::default().exclude(vec!["opt.*".into()]);
    // Refused unless asked for (issue 16.1): the input stays as it was.
    let e = run(std::slice::from_ref(&path), &path, &opts(plan.clone())).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutputIsInput(_)), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    run(std::slice::from_ref(&path), &path, &overwriting(plan)).unwrap();
    let kept: Vec<T> = ts
        .iter()
        .filter(|t| t.name != "opt.state")
        .cloned()
        .collect();
    assert!(std::fs::read(&path).unwrap() == ref_serialize(&kept, None));
    assert_eq!(listing(dir.path()), ["m.safetensors"]);
}

#[test]
fn resharding_a_checkpoint_in_place_works() {
    // Shard names of the output equal the input's: the input is read while
    // the new set is staged, and replaced only at the end.
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let single = ref_file(dir.path(), "orig.safetensors", &ts, None);
    let out = dir.path().join("m.safetensors");
    let o = opts(PlanOptions::default().max_shard_size(Some(100)));
    run(std::slice::from_ref(&single), &out, &o).unwrap();
    let index = dir.path().join("m.safetensors.index.json");
    // Same number of shards (5), different data: rename every tensor.
    let o = overwriting(
        PlanOptions::default()
            .max_shard_size(Some(100))
            .prefix(Some("x.".into())),
    );
    run(std::slice::from_ref(&index), &out, &o).unwrap();
    let cp = Checkpoint::open(&index, Rules::STRICT).unwrap();
    assert_eq!(cp.files.len(), 5);
    let back = dir.path().join("back.safetensors");
    run(&[index], &back, &opts(PlanOptions::default())).unwrap();
    let renamed: Vec<T> = ts
        .iter()
        .map(|t| T {
            name: format!("x.{}", t.name),
            ..t.clone()
        })
        .collect();
    assert!(std::fs::read(&back).unwrap() == ref_serialize(&renamed, None));
}

#[test]
fn convert_sources_refuses_an_output_that_is_one_of_its_inputs() {
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let single = ref_file(dir.path(), "m.safetensors", &ts, None);
    let before = std::fs::read(&single).unwrap();
    let o = opts(PlanOptions::default());
    let opened = || block_on(open_inputs(std::slice::from_ref(&single), &o)).unwrap();
    // The sources say what they read: no paths are handed beside them.
    let mut sources = opened();
    let out = Output::File(single.clone());
    let e = block_on(convert_sources(&mut sources, &out, &o)).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutputIsInput(_)), "{e}");
    assert_eq!(std::fs::read(&single).unwrap(), before);
    // A link to it is the same file.
    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&single, &link).unwrap();
    let e = block_on(convert_sources(&mut opened(), &Output::File(link), &o)).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutputIsInput(_)), "{e}");
    // Asked for, it is replaced.
    let mut sources = opened();
    block_on(convert_sources(
        &mut sources,
        &out,
        &overwriting(PlanOptions::default()),
    ))
    .unwrap();
    assert!(std::fs::read(&single).unwrap() == ref_serialize(&ts, None));
}

#[test]
fn an_index_input_reports_every_file_it_read() {
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let single = ref_file(dir.path(), "orig.safetensors", &ts, None);
    let out = dir.path().join("m.safetensors");
    let o = opts(PlanOptions::default().max_shard_size(Some(100)));
    run(std::slice::from_ref(&single), &out, &o).unwrap();
    let index = dir.path().join("m.safetensors.index.json");
    let shards: Vec<PathBuf> = (1..=5)
        .map(|k| dir.path().join(format!("m-{k:05}-of-00005.safetensors")))
        .collect();
    // By the index, and by the folder it is in (the folder stands for it).
    let folder = dir.path().join("set");
    std::fs::create_dir(&folder).unwrap();
    for path in shards.iter().chain([&index]) {
        std::fs::rename(path, folder.join(path.file_name().unwrap())).unwrap();
    }
    let in_folder = |p: &PathBuf| folder.join(p.file_name().unwrap());
    for input in [in_folder(&index), folder.clone()] {
        let sources = block_on(open_inputs(std::slice::from_ref(&input), &o)).unwrap();
        let read: Vec<Opened> = sources.iter().flat_map(|s| s.opened()).collect();
        let paths: Vec<PathBuf> = read
            .iter()
            .map(|r| match &r.location {
                Location::File(p) => p.clone(),
                other => panic!("{input:?}: {other:?} is no file"),
            })
            .collect();
        let mut expected = vec![in_folder(&index)];
        expected.extend(shards.iter().map(in_folder));
        assert_eq!(paths, expected, "{input:?}");
        for (r, path) in read.iter().zip(&expected) {
            let meta = std::fs::metadata(path).unwrap();
            use std::os::unix::fs::MetadataExt;
            let id = Identity::File {
                dev: meta.dev(),
                ino: meta.ino(),
                version: Some((meta.len(), (meta.mtime(), meta.mtime_nsec()))),
            };
            assert_eq!(r.identity, id, "{}", path.display());
        }
    }
    // One file onto any one shard is refused, through the report alone.
    let shard = in_folder(&shards[3]);
    let mut sources = block_on(open_inputs(std::slice::from_ref(&folder), &o)).unwrap();
    let one = opts(PlanOptions::default());
    let e = block_on(convert_sources(&mut sources, &Output::File(shard), &one)).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutputIsInput(_)), "{e}");
}

#[test]
fn the_plan_id_changes_when_any_file_read_changes() {
    let ts = shard_input();
    let dir = tempfile::tempdir().unwrap();
    let single = ref_file(dir.path(), "orig.safetensors", &ts, None);
    let o = opts(PlanOptions::default().max_shard_size(Some(100)));
    let set = dir.path().join("set");
    run(
        std::slice::from_ref(&single),
        &set.join("m.safetensors"),
        &o,
    )
    .unwrap();
    let index = set.join("m.safetensors.index.json");
    let plan_id = || {
        let sources = block_on(open_inputs(std::slice::from_ref(&set), &o)).unwrap();
        let out = Output::File(dir.path().join("out.safetensors"));
        dry_run(&sources, &out, &opts(PlanOptions::default()))
            .unwrap()
            .plan_id()
    };
    let first = plan_id();
    assert_eq!(plan_id(), first, "a plan id is made of versions only");
    // Each file read, the index too, rewritten as it was at another time:
    // another version, another id; put back, the same id again.
    let shard = set.join("m-00003-of-00005.safetensors");
    for file in [&index, &shard] {
        let f = std::fs::File::options().write(true).open(file).unwrap();
        let mtime = f.metadata().unwrap().modified().unwrap();
        let earlier = mtime - std::time::Duration::from_secs(3600);
        f.set_modified(earlier).unwrap();
        assert_ne!(plan_id(), first, "{} changed", file.display());
        f.set_modified(mtime).unwrap();
        assert_eq!(plan_id(), first, "{} put back", file.display());
    }
}

// ---- progress ---------------------------------------------------------------

/// What progress is told, in order: each tensor as (shard, shards, name).
#[derive(Default)]
struct Recording(std::sync::Mutex<Vec<(usize, usize, String)>>);

impl safetensors_stream::observe::Progress for Recording {
    fn tensor(&self, shard: usize, shards: usize, name: &str) {
        let told = (shard, shards, name.to_string());
        self.0.lock().unwrap().push(told);
    }
}

/// Tensors that take every file-to-file route: big ones back to back (one
/// merged kernel copy), small ones (gathered into batches), an F32 one
/// cast on the way (positional reads through the buffer).
fn progress_input() -> Vec<T> {
    let mut ts = vec![
        T::new("big.0", Dtype::U8, &[256 << 10]),
        T::new("big.1", Dtype::U8, &[256 << 10]),
        T::new("cast", Dtype::F32, &[4096]),
    ];
    ts.extend((0..6).map(|i| T::new(&format!("small.{i}"), Dtype::I16, &[50])));
    ts
}

/// What progress should be told of the files written at `outs`, shard by
/// shard: every tensor once, in the order it lies in its file.
fn told_of(outs: &[PathBuf]) -> Vec<(usize, usize, String)> {
    outs.iter()
        .enumerate()
        .flat_map(|(k, out)| {
            let names = names_in_offset_order(&std::fs::read(out).unwrap());
            names.into_iter().map(move |n| (k, outs.len(), n))
        })
        .collect()
}

#[test]
fn progress_names_every_tensor_as_it_is_copied_on_every_route() {
    let src = tempfile::tempdir().unwrap();
    let input = ref_file(src.path(), "in.safetensors", &progress_input(), None);
    let casts = PlanOptions::default().casts(vec![(Dtype::F32, Dtype::F16)]);
    let sharded = casts.clone().max_shard_size(Some(300 << 10));
    let routes = [
        ("file", opts(casts.clone())),
        ("sharded", opts(sharded.clone())),
        ("through the sink", opts(casts.clone()).fast_path(false)),
        ("checksummed", opts(sharded).checksum(true)),
    ];
    for (route, options) in routes {
        let dir = tempfile::tempdir().unwrap();
        let recording = std::sync::Arc::new(Recording::default());
        let options = options.progress(Some(recording.clone() as _));
        let out = dir.path().join("m.safetensors");
        let report = run(std::slice::from_ref(&input), &out, &options).unwrap();
        let shards: Vec<PathBuf> = report
            .outputs
            .iter()
            .filter(|o| o.tensors > 0)
            .map(|o| PathBuf::from(&o.path))
            .collect();
        let told = recording.0.lock().unwrap().clone();
        assert_eq!(told, told_of(&shards), "{route}");
    }
}
