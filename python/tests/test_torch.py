"""safetensors_stream.torch against safetensors.torch (0.8): the same bytes for
every dtype, non-contiguous tensors in C order, shared tensors refused,
tied weights kept as transformers keeps them, devices copied in pieces.

Skipped when torch is not installed (CI does not install it): ``pytest -rs``
prints the reason."""

import pathlib

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch API is tested where it is")
st_torch = pytest.importorskip("safetensors.torch", reason="safetensors.torch (the oracle) needs torch")

import safetensors_stream as sts  # noqa: E402
from safetensors_stream import torch as stt  # noqa: E402

DTYPES = [
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
]


def tensor_of(dtype: "torch.dtype", shape, seed: int = 0) -> "torch.Tensor":
    """Arbitrary bit patterns of ``dtype`` (every byte value, NaNs included)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def flat(pieces) -> "torch.Tensor":
    """The bytes of pieces in turn (NaNs compare equal as bytes)."""
    return torch.cat([p.contiguous().reshape(-1).view(torch.uint8) for p in pieces])


def same_bytes(tensors, tmp: pathlib.Path, metadata=None) -> bytes:
    ours, ref = tmp / "ours.safetensors", tmp / "ref.safetensors"
    stt.save_file(tensors, ours, metadata=metadata)
    st_torch.save_file(tensors, str(ref), metadata=metadata)
    assert ours.read_bytes() == ref.read_bytes()
    return ours.read_bytes()


@pytest.mark.parametrize("name", [d for d in DTYPES if hasattr(torch, d)])
def test_every_dtype_is_byte_identical_to_the_reference(tmp_path, name):
    dtype = getattr(torch, name)
    tensors = {"b": tensor_of(dtype, (3, 5), 1), "a": tensor_of(dtype, (7,), 2), "s": tensor_of(dtype, (), 3)}
    same_bytes(tensors, tmp_path)


def test_mixed_dtypes_empty_tensors_and_metadata(tmp_path):
    tensors = {
        "w": torch.randn(4, 3, dtype=torch.bfloat16),
        "ids": torch.arange(10),
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor(True),
        "p": torch.nn.Parameter(torch.ones(2, 2)),
    }
    same_bytes(tensors, tmp_path, metadata={"format": "pt"})


def test_disjoint_views_of_one_storage_are_accepted_as_by_the_reference(tmp_path):
    big = torch.arange(48, dtype=torch.float32)
    same_bytes({"a": big[:24].view(4, 6), "b": big[24:].view(4, 6)}, tmp_path)


def test_non_contiguous_tensors_are_written_in_c_order(tmp_path):
    views = {
        "t": tensor_of(torch.bfloat16, (6, 8), 4).t(),
        "step": tensor_of(torch.float8_e5m2, (6, 8), 5)[::2, 1::3],
        "expanded": torch.arange(5, dtype=torch.int32).expand(3, 5),
        "channels_last": torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        "neg": torch.randn(3, 2).t().neg(),
    }
    ours = tmp_path / "ours.safetensors"
    stt.save_file(views, ours)
    with pytest.raises(ValueError):
        st_torch.save_file(views, str(tmp_path / "refused.safetensors"))
    ref = tmp_path / "ref.safetensors"
    st_torch.save_file({k: v.contiguous() for k, v in views.items()}, str(ref))
    assert ours.read_bytes() == ref.read_bytes()


def test_pieces_are_bounded_and_in_c_order():
    t = tensor_of(torch.float32, (64, 40), 5).t()  # 40 x 64, non-contiguous
    pieces = list(stt.tensor_pieces(t, piece=1000))
    assert max(p.numel() * p.element_size() for p in pieces) <= 1000
    assert all(p.is_contiguous() and p.device.type == "cpu" for p in pieces)
    assert torch.equal(flat(pieces), flat([t]))
    # A row longer than a piece is split by rows of the next dimension.
    t3 = tensor_of(torch.int16, (3, 50, 7), 6).transpose(1, 2)
    pieces = list(stt.tensor_pieces(t3, piece=64))
    assert max(p.numel() * p.element_size() for p in pieces) <= 100  # one innermost row: 50 x 2 bytes
    assert torch.equal(flat(pieces), flat([t3]))


class FakeDevice:
    """A tensor on a device that is not the CPU: what tensor_pieces uses of a
    CUDA tensor, recording every copy to the host."""

    class Kind:
        type = "cuda"

    def __init__(self, t, copies):
        self.t, self.copies, self.device = t, copies, FakeDevice.Kind()
        self.shape = t.shape

    def numel(self):
        return self.t.numel()

    def dim(self):
        return self.t.dim()

    def element_size(self):
        return self.t.element_size()

    def is_contiguous(self):
        return self.t.is_contiguous()

    def reshape(self, *s):
        return FakeDevice(self.t.reshape(*s), self.copies)

    def contiguous(self):
        return FakeDevice(self.t.contiguous(), self.copies)

    def __getitem__(self, k):
        return FakeDevice(self.t[k], self.copies)

    def to(self, device):
        assert device == "cpu"
        self.copies.append(self.t.numel() * self.t.element_size())
        return self.t.clone()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_device_tensor_reaches_the_host_in_bounded_pieces(layout):
    t = tensor_of(torch.float16, (256, 96), 7)
    if layout == "transposed":
        t = t.t()
    copies: list[int] = []
    pieces = list(stt.tensor_pieces(FakeDevice(t, copies), piece=4096))
    assert len(copies) == len(pieces) > 1
    assert max(copies) <= 4096, "never the whole tensor on the host"
    assert torch.equal(flat(pieces), flat([t]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_are_written_as_the_reference_writes_them(tmp_path):
    tensors = {"w": torch.randn(300, 70, device="cuda"), "t": torch.randn(40, 30, device="cuda").t()}
    ours = tmp_path / "ours.safetensors"
    stt.save_file(tensors, ours)
    ref = tmp_path / "ref.safetensors"
    st_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(ref))
    assert ours.read_bytes() == ref.read_bytes()


def test_shared_tensors_are_refused_as_by_the_reference(tmp_path):
    w = torch.randn(4, 3)
    for tensors in ({"a": w, "b": w}, {"a": w, "b": w[1:]}):
        with pytest.raises(RuntimeError):
            st_torch.save_file(tensors, str(tmp_path / "ref.safetensors"))
        with pytest.raises(sts.UsageError) as e:
            stt.save_file(tensors, tmp_path / "ours.safetensors")
        assert e.value.kind == "shared_tensors" and "save_model" in str(e.value)
        assert not (tmp_path / "ours.safetensors").exists()


def test_refusals_name_the_tensor(tmp_path):
    for bad, what in [
        ({"s": torch.zeros(3).to_sparse()}, "sparse"),
        ({"m": torch.zeros(3, device="meta")}, "meta"),
        ({"n": [1, 2]}, "torch.Tensor"),
    ]:
        with pytest.raises(sts.UsageError) as e:
            stt.save_file(bad, tmp_path / "x.safetensors")
        assert what in str(e.value) and e.value.tensor == next(iter(bad))


def test_the_writer_takes_torch_tensors_and_dtypes_as_chunks(tmp_path):
    w = tensor_of(torch.bfloat16, (10, 6), 8)
    f8 = tensor_of(torch.float8_e4m3fn, (12,), 9)
    out = tmp_path / "w.safetensors"
    with sts.Writer(out, [("w", torch.bfloat16, w.shape), ("f8", torch.float8_e4m3fn, f8.shape)]) as wr:
        for name in wr.order:
            t = {"w": w, "f8": f8}[name]
            for rows in t.split(4):  # pieces of any size, non-contiguous ones too
                wr.write(name, rows.t().t() if rows.dim() > 1 else rows)
    ref = tmp_path / "ref.safetensors"
    st_torch.save_file({"w": w, "f8": f8}, str(ref))
    assert out.read_bytes() == ref.read_bytes()


class Tied(torch.nn.Module):
    """GPT-2's layout: the input embedding registered before the head tied to
    it, whose name sorts first; a buffer shared the same way."""

    def __init__(self, tied_keys=None):
        super().__init__()
        self.wte = torch.nn.Embedding(8, 4)
        self.h = torch.nn.Linear(4, 4)
        self.lm_head = torch.nn.Linear(4, 8, bias=False)
        self.lm_head.weight = self.wte.weight
        if tied_keys is not None:
            self._tied_weights_keys = tied_keys


def test_save_model_keeps_the_first_name_in_module_order(tmp_path):
    from safetensors import safe_open

    out = tmp_path / "m.safetensors"
    stt.save_model(Tied(), out, metadata={"note": "x"})
    with safe_open(str(out), "pt") as f:
        assert sorted(f.keys()) == ["h.bias", "h.weight", "wte.weight"]
        assert f.metadata() == {"format": "pt", "note": "x", "lm_head.weight": "wte.weight"}
    # The reference keeps the first in sorted order, which transformers 4.5x does not re-tie.
    ref = tmp_path / "ref.safetensors"
    st_torch.save_model(Tied(), str(ref))
    with safe_open(str(ref), "pt") as f:
        assert "lm_head.weight" in f.keys() and "wte.weight" not in f.keys()


class HeadFirst(torch.nn.Module):
    """A tie target registered first: only _tied_weights_keys tells."""

    def __init__(self, tied_keys):
        super().__init__()
        self.lm_head = torch.nn.Linear(4, 8, bias=False)
        self.wte = torch.nn.Embedding(8, 4)
        self.lm_head.weight = self.wte.weight
        self._tied_weights_keys = tied_keys


@pytest.mark.parametrize("keys", [["lm_head.weight"], {"lm_head.weight": "wte.weight"}])
def test_save_model_drops_the_tied_weights_keys_as_transformers_does(tmp_path, keys):
    from safetensors import safe_open

    out = tmp_path / "m.safetensors"
    stt.save_model(HeadFirst(keys), out)
    with safe_open(str(out), "pt") as f:
        assert list(f.keys()) == ["wte.weight"]
        assert f.metadata() == {"format": "pt", "lm_head.weight": "wte.weight"}


def test_save_model_output_loads_in_huggingface_hub(tmp_path):
    """Its loader (and transformers 4.x's) refuse a file with metadata but
    no ``format`` of ``pt``; ``save_model`` records the tied names in the
    metadata, so it must say the format too."""
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed")
    model = Tied()
    out = tmp_path / "m.safetensors"
    stt.save_model(model, out, metadata={"note": "x"})
    loaded = hub.load_state_dict_from_file(str(out))
    assert sorted(loaded) == ["h.bias", "h.weight", "wte.weight"]
    for name, t in loaded.items():
        assert torch.equal(t, model.state_dict()[name]), name
    # A format the caller gives is kept.
    stt.save_model(model, out, metadata={"format": "mlx"})
    assert hub.load_state_dict_from_file(str(out)).keys() == loaded.keys()


def test_save_model_matches_transformers_save_pretrained(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from safetensors.torch import load_file

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, n_positions=8, vocab_size=16)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(tmp_path / "hf")
    theirs = load_file(str(tmp_path / "hf" / "model.safetensors"))
    stt.save_model(model, tmp_path / "ours.safetensors")
    ours = load_file(str(tmp_path / "ours.safetensors"))
    assert sorted(ours) == sorted(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_importing_the_package_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, safetensors_stream; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reused_pieces_give_the_same_bytes_one_at_a_time():
    t = tensor_of(torch.bfloat16, (64, 40), 10).t()
    got = [p.reshape(-1).view(torch.uint8).clone() for p in stt.tensor_pieces(t, piece=1000, reuse=True)]
    assert len(got) > 1 and torch.equal(torch.cat(got), flat([t]))
