"""Issue 42, a new user's fourth try, through the Python package: what
``dir()`` offers, warnings that say which keyword would help."""

import struct
import warnings
import zipfile

import pytest

import safetensors_stream as sts


def test_dir_lists_the_api_and_nothing_it_imports():
    public = [n for n in dir(sts) if not n.startswith("_")]
    assert public == sorted(sts.__all__)
    assert "__version__" in dir(sts)
    # What dir() leaves out stays reachable.
    assert sts.IOError is sts.EnvironmentIOError


# ---- 9: a training checkpoint without pt_root, tied weights without dedupe_tied ---------------


def _text(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _tensor(key, n):
    """``_rebuild_tensor_v2`` of all ``n`` floats of storage ``key``, as torch pickles it."""
    count = b"J" + struct.pack("<i", n)
    return (b"ctorch._utils\n_rebuild_tensor_v2\n((" + _text("storage") + b"ctorch\nFloatStorage\n"
            + _text(key) + _text("cpu") + count + b"tQK\x00(" + count
            + b"t(K\x01t\x89ccollections\nOrderedDict\n)RtR")


def _training_checkpoint(path):
    """What ``torch.save({"epoch": 3, "model": {"w": t}, "optimizer": {"m": t2}})`` writes,
    without torch: no tensor at the top level."""
    pickle = (b"\x80\x02}(" + _text("epoch") + b"J" + struct.pack("<i", 3)
              + _text("model") + b"}(" + _text("w") + _tensor("0", 2) + b"u"
              + _text("optimizer") + b"}(" + _text("m") + _tensor("1", 2) + b"u" + b"u.")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", struct.pack("<2f", 1.0, 2.0))
        z.writestr("archive/data/1", struct.pack("<2f", 0.5, 0.25))
    return path


def test_a_training_checkpoint_without_pt_root_warns_naming_the_keyword(tmp_path):
    src = _training_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "o.safetensors"
    with pytest.warns(UserWarning, match='only under "model" \\(1 tensor\\), "optimizer"') as caught:
        report = sts.convert(src, out)
    said = [str(w.message) for w in caught if "pt_root" in str(w.message)]
    assert len(said) == 1 and 'pass pt_root="model"' in said[0], said
    assert [w for w in report["warnings"] if 'pt_root="model"' in w], report["warnings"]
    assert not [w for w in report["warnings"] if "--" in w], report["warnings"]
    assert report["tensors"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = sts.convert(src, out, pt_root="model")
    assert report["tensors"] == 1 and report["warnings"] == []


def test_tied_weights_written_twice_warn_naming_dedupe_tied(tmp_path, fixtures):
    src = fixtures / "pytorch/ok/tied.pt"
    out = tmp_path / "o.safetensors"
    for dry_run in (False, True):
        with pytest.warns(UserWarning, match=r'"lm_head.weight" \(the same as "embed.weight"\); pass dedupe_tied=True'):
            report = sts.convert(src, out, dry_run=dry_run)
        assert [w for w in report["warnings"] if "dedupe_tied=True" in w and "24 bytes" in w], report
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = sts.convert(src, out, dedupe_tied=True)
    assert report["tensors"] == 2
