//! ndarray in and out: views of any layout (standard, Fortran, sliced,
//! strided, reversed) stream through `ArraySource` + `convert_sources` and
//! come back equal through `read_array`; `read_array` checks the dtype; and
//! `read_tensor_bytes` reads that tensor and nothing else.

use crate::support;

use support::block_on;

use std::path::{Path, PathBuf};

use half::{bf16, f16};
use ndarray::ShapeBuilder;
use ndarray::{arr0, s, Array, Array1, Array2, Array3, ArrayD, ArrayView, Dimension, IxDyn};
use safetensors_stream::array::{read_array, read_tensor_bytes, ArraySource, Element};
use safetensors_stream::convert::{convert_sources, ConvertOptions, Output};
use safetensors_stream::header::{encode, Order, TensorMeta};
use safetensors_stream::plan::Cast;
use safetensors_stream::plan::PlanOptions;
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::Source;
use safetensors_stream::{Category, Dtype, ErrorKind};

fn options(buffer_size: usize) -> ConvertOptions {
    ConvertOptions::default()
        .sink(SinkOptions::default().buffer_size(buffer_size))
        .sync(false)
}

/// Writes `src` to `dir/name` and returns the path.
fn write(dir: &Path, name: &str, src: ArraySource<'_>, opts: &ConvertOptions) -> PathBuf {
    let out = dir.join(name);
    let mut sources: Vec<Box<dyn Source + '_>> = vec![Box::new(src)];
    block_on(convert_sources(
        &mut sources,
        &Output::File(out.clone()),
        opts,
    ))
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    out
}

/// The little-endian bytes of `a` in logical C order, by index (not by the
/// crate's iteration): what the file must hold.
fn c_order_bytes<T: Element, D: Dimension>(a: &ArrayView<'_, T, D>) -> Vec<u8> {
    let a = a.view().into_dyn();
    let shape = a.shape().to_vec();
    let n: usize = shape.iter().product();
    let mut out = vec![0u8; n * T::WIDTH];
    let mut idx = vec![0usize; shape.len()];
    for k in 0..n {
        // idx is the k-th index in row-major order
        let mut r = k;
        for d in (0..shape.len()).rev() {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        a[IxDyn(&idx)].write_le(&mut out[k * T::WIDTH..(k + 1) * T::WIDTH]);
    }
    out
}

fn numbered<T, D: Dimension, Sh: ShapeBuilder<Dim = D>>(
    shape: Sh,
    f: impl Fn(usize) -> T,
) -> Array<T, D> {
    let shape = shape.into_shape_with_order();
    let n = shape.size();
    Array::from_shape_vec(shape, (0..n).map(f).collect()).unwrap()
}

#[test]
fn layouts_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let std2: Array2<f32> = numbered((5, 7), |i| i as f32 * 0.5 - 3.0);
    let fortran: Array2<f32> = numbered((5, 7).f(), |i| i as f32 + 0.25);
    let cube: Array3<f64> = numbered((4, 6, 5), |i| (i as f64).sqrt());
    let fortran3: Array3<i16> = numbered((3, 4, 5).f(), |i| i as i16 - 30);
    assert!(!fortran.is_standard_layout());

    let views: Vec<(&str, ArrayView<'_, f32, _>)> = vec![
        ("standard", std2.view()),
        ("fortran", fortran.view()),
        ("transposed", std2.t()),
        ("reversed_axes", std2.view().reversed_axes()),
        ("every_other_row", std2.slice(s![..;2, 1..])),
        ("strided_both", std2.slice(s![1..;2, ..;3])),
        ("negative_stride", std2.slice(s![..;-1, 2..5])),
        ("fortran_sliced", fortran.slice(s![1..4, ..;-2])),
        ("empty_rows", std2.slice(s![2..2, ..])),
    ];
    // A 1-d column: strided in memory by the row length.
    let column = std2.column(3);
    let cube_slice = cube.slice(s![.., ..;3, 1..;2]);
    let cube_permuted = cube.view().permuted_axes([2, 0, 1]);
    let f3_slice = fortran3.slice(s![..;-1, 1.., ..;2]);
    let scalar = arr0(42.5f64);
    let one = Array1::from_elem(1, 7u64);

    for buffer in [1, 3, 13, 4 << 20] {
        let mut src = ArraySource::new("memory");
        for (name, v) in &views {
            src.push(*name, *v).unwrap();
        }
        src.push("column", column).unwrap();
        src.push("cube_slice", cube_slice).unwrap();
        src.push("cube_permuted", cube_permuted).unwrap();
        src.push("f3_slice", f3_slice).unwrap();
        src.push("scalar", scalar.view()).unwrap();
        src.push("one", one.view()).unwrap();
        let out = write(
            dir.path(),
            &format!("l{buffer}.safetensors"),
            src,
            &options(buffer),
        );

        for (name, v) in &views {
            let back = read_array::<f32>(&out, name).unwrap();
            assert_eq!(back, v.to_owned().into_dyn(), "{name}, buffer {buffer}");
            assert!(back.is_standard_layout());
            let (meta, bytes) = read_tensor_bytes(&out, name).unwrap();
            assert_eq!(meta.dtype, Dtype::F32);
            let shape: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
            assert_eq!(meta.shape, shape, "{name}");
            assert_eq!(bytes, c_order_bytes(v), "{name}: logical C order");
        }
        assert_eq!(
            read_array::<f32>(&out, "column").unwrap(),
            column.to_owned().into_dyn()
        );
        assert_eq!(
            read_array::<f64>(&out, "cube_slice").unwrap(),
            cube_slice.to_owned().into_dyn()
        );
        assert_eq!(
            read_array::<f64>(&out, "cube_permuted").unwrap(),
            cube_permuted.to_owned().into_dyn()
        );
        assert_eq!(
            read_tensor_bytes(&out, "cube_permuted").unwrap().1,
            c_order_bytes(&cube_permuted)
        );
        assert_eq!(
            read_array::<i16>(&out, "f3_slice").unwrap(),
            f3_slice.to_owned().into_dyn()
        );
        let s = read_array::<f64>(&out, "scalar").unwrap();
        assert_eq!(s.shape(), &[] as &[usize]);
        assert_eq!(s[IxDyn(&[])], 42.5);
        assert_eq!(
            read_array::<u64>(&out, "one").unwrap(),
            one.clone().into_dyn()
        );
    }
}

/// Every element type, standard and Fortran, with values at their extremes.
#[test]
fn every_element_type_round_trips() {
    fn check<T: Element + PartialEq + std::fmt::Debug>(dir: &Path, values: &[T]) {
        let n = values.len();
        let c = Array2::from_shape_fn((n, 3), |(i, j)| values[(i + j) % n]);
        let f = Array2::from_shape_fn((n, 3).f(), |(i, j)| values[(i * 2 + j) % n]);
        let mut src = ArraySource::new("memory");
        src.push("c", c.view()).unwrap();
        src.push("f", f.view()).unwrap();
        src.push("fs", f.slice(s![..;-1, 1..])).unwrap();
        let name = format!("{}.safetensors", T::DTYPE);
        let out = write(dir, &name, src, &options(5));
        assert_eq!(
            read_array::<T>(&out, "c").unwrap(),
            c.into_dyn(),
            "{}",
            T::DTYPE
        );
        assert_eq!(
            read_array::<T>(&out, "f").unwrap(),
            f.clone().into_dyn(),
            "{}",
            T::DTYPE
        );
        assert_eq!(
            read_array::<T>(&out, "fs").unwrap(),
            f.slice(s![..;-1, 1..]).to_owned().into_dyn()
        );
        let (meta, _) = read_tensor_bytes(&out, "c").unwrap();
        assert_eq!(meta.dtype, T::DTYPE);
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    check(d, &[0u8, 1, 254, 255]);
    check(d, &[i8::MIN, -1, 0, i8::MAX]);
    check(d, &[0u16, 1, 0x1234, u16::MAX]);
    check(d, &[i16::MIN, -1, 0, i16::MAX]);
    check(d, &[0u32, 1, 0xdead_beef, u32::MAX]);
    check(d, &[i32::MIN, -1, 0, i32::MAX]);
    check(d, &[0u64, 1, 0x0123_4567_89ab_cdef, u64::MAX]);
    check(d, &[i64::MIN, -1, 0, i64::MAX]);
    check(
        d,
        &[0.0f32, -0.0, f32::MIN_POSITIVE, f32::MAX, f32::NEG_INFINITY],
    );
    check(
        d,
        &[0.0f64, -1.5, f64::MIN_POSITIVE, f64::MAX, f64::INFINITY],
    );
    check(
        d,
        &[
            f16::ZERO,
            f16::MAX,
            f16::from_f32(-2.5),
            f16::MIN_POSITIVE_SUBNORMAL,
        ],
    );
    check(
        d,
        &[
            bf16::ZERO,
            bf16::MAX,
            bf16::from_f32(-2.5),
            bf16::NEG_INFINITY,
        ],
    );
    check(d, &[true, false, false, true]);
}

#[test]
fn wrong_element_type_is_a_dtype_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let a: Array2<f32> = numbered((2, 3), |i| i as f32);
    let mut src = ArraySource::new("memory");
    src.push("w", a.view()).unwrap();
    let out = write(dir.path(), "m.safetensors", src, &options(1 << 20));
    let e = read_array::<f64>(&out, "w").unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::DtypeMismatch {
                expected: Dtype::F64,
                actual: Dtype::F32
            }
        ),
        "{e}"
    );
    assert_eq!(e.category(), Category::Usage);
    let msg = e.to_string();
    assert!(
        msg.contains("F32") && msg.contains("F64") && msg.contains('w'),
        "{msg}"
    );
    // Same width, other type: still refused.
    assert!(matches!(
        read_array::<u32>(&out, "w").unwrap_err().kind(),
        ErrorKind::DtypeMismatch { .. }
    ));
    assert!(matches!(
        read_array::<i32>(&out, "w").unwrap_err().kind(),
        ErrorKind::DtypeMismatch { .. }
    ));
    // No such tensor.
    let e = read_array::<f32>(&out, "nope").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorNotFound(_)), "{e}");
    assert!(read_tensor_bytes(&out, "nope").is_err());
}

/// A file whose first tensor is 64 GiB of holes (a sparse file): the small
/// tensor after it is read with one positioned read; reading the rest would
/// need 64 GiB of memory.
#[test]
fn read_tensor_bytes_reads_only_that_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.safetensors");
    let big = 1u64 << 33; // F64 elements: 64 GiB
    let enc = encode(
        vec![
            TensorMeta::new("small", Dtype::F32, [2, 2]),
            TensorMeta::new("big", Dtype::F64, [big]),
        ],
        None,
        Order::Canonical,
    )
    .unwrap();
    let header = enc.header();
    let small = header.get("small").unwrap();
    assert!(
        small.begin >= big * 8,
        "the small tensor lies after the big one"
    );
    let file = std::fs::File::create(&path).unwrap();
    if file.set_len(header.file_len()).is_err() {
        eprintln!("no sparse files here; skipped");
        return;
    }
    use std::os::unix::fs::FileExt;
    file.write_all_at(enc.bytes(), 0).unwrap();
    let values = [1.0f32, -2.0, 3.5, f32::MAX];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    file.write_all_at(&bytes, header.data_start() + small.begin)
        .unwrap();
    drop(file);

    let t = std::time::Instant::now();
    let (meta, got) = read_tensor_bytes(&path, "small").unwrap();
    assert_eq!(meta.shape, [2, 2]);
    assert_eq!(got, bytes);
    let a = read_array::<f32>(&path, "small").unwrap();
    assert_eq!(
        a,
        Array2::from_shape_vec((2, 2), values.to_vec())
            .unwrap()
            .into_dyn()
    );
    assert!(t.elapsed().as_secs() < 5, "took {:?}", t.elapsed());
}

/// A file from the reference writer (the fixtures): read back by name,
/// 0-d tensors included.
#[test]
fn reads_files_the_reference_wrote() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example/model.safetensors");
    let w = read_array::<f32>(&path, "layer.0.weight").unwrap();
    assert_eq!(w.shape(), &[8, 4]);
    let h = read_array::<f16>(&path, "layer.1.weight").unwrap();
    assert_eq!(h.shape(), &[2, 8]);
    let step = read_array::<i64>(&path, "step").unwrap();
    assert_eq!(step.ndim(), 0);
    assert_eq!(step[IxDyn(&[])], 1000);
    let (meta, bytes) = read_tensor_bytes(&path, "layer.0.bias").unwrap();
    assert_eq!((meta.dtype, meta.shape.clone()), (Dtype::F32, vec![8]));
    assert_eq!(bytes.len(), 32);
    let via_array: Vec<u8> = read_array::<f32>(&path, "layer.0.bias")
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(bytes, via_array);
}

/// Arrays stream through the same sink as files: a cast applies to them too.
#[test]
fn arrays_with_a_cast() {
    let dir = tempfile::tempdir().unwrap();
    let a: Array2<f32> = numbered((6, 5).f(), |i| i as f32 / 3.0 - 4.0);
    let b: Array1<f64> = numbered(9, |i| 1.0 / (i as f64 + 1.0));
    let mut src = ArraySource::new("memory");
    src.push("a", a.slice(s![1.., ..;2])).unwrap();
    src.push("b", b.view()).unwrap();
    let opts = options(7).plan(PlanOptions::default().cast_all(Some(Dtype::BF16)));
    let out = write(dir.path(), "cast.safetensors", src, &opts);
    let got_a = read_array::<bf16>(&out, "a").unwrap();
    let want_a: ArrayD<bf16> = a.slice(s![1.., ..;2]).mapv(bf16::from_f32).into_dyn();
    assert_eq!(got_a, want_a);
    // F64 -> BF16 as the cast module does it (checked against ml_dtypes in tests/it/casts.rs).
    let (_, got_b) = read_tensor_bytes(&out, "b").unwrap();
    let cast = Cast::new(Dtype::F64, Dtype::BF16).unwrap();
    let mut want_b = vec![0u8; 9 * 2];
    cast.apply(&c_order_bytes(&b.view()), &mut want_b);
    assert_eq!(got_b, want_b);
    let back = read_array::<bf16>(&out, "b").unwrap();
    for (g, w) in back.iter().zip(b.iter()) {
        assert!((g.to_f64() - w).abs() <= w.abs() / 128.0, "{g} vs {w}");
    }
    assert!(matches!(
        read_array::<f32>(&out, "a").unwrap_err().kind(),
        ErrorKind::DtypeMismatch {
            expected: Dtype::F32,
            actual: Dtype::BF16
        }
    ));
}

#[test]
fn array_source_lists_its_tensors() {
    let a: Array3<u16> = numbered((2, 0, 3), |i| i as u16);
    let b = arr0(true);
    let mut src = ArraySource::new("mine");
    src.push("a", a.view())
        .unwrap()
        .push("b", b.view())
        .unwrap();
    assert_eq!(src.input_name(), "mine");
    let t = src.tensors();
    assert_eq!(t[0], TensorMeta::new("a", Dtype::U16, [2, 0, 3]));
    assert_eq!(t[1], TensorMeta::new("b", Dtype::BOOL, []));
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "e.safetensors", src, &options(1 << 20));
    assert_eq!(read_array::<u16>(&out, "a").unwrap().shape(), &[2, 0, 3]);
    assert!(read_array::<bool>(&out, "b").unwrap()[IxDyn(&[])]);
}
