"""``convert`` with object URLs, against the local S3 server the CI starts
(``SAFETENSORS_STREAM_S3_ENDPOINT``, see ``.ci/run``): skipped without one."""

import os
import pathlib
import urllib.request
import uuid

import pytest

import safetensors_stream as sts

ENDPOINT = os.environ.get("SAFETENSORS_STREAM_S3_ENDPOINT")
pytestmark = pytest.mark.skipif(
    not ENDPOINT, reason="no local S3 server (SAFETENSORS_STREAM_S3_ENDPOINT unset)"
)

# moto checks that a request is signed, not the signature.
AUTH = (
    "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=00"
)


def request(method: str, target: str) -> bytes:
    req = urllib.request.Request(ENDPOINT + target, method=method, headers={"Authorization": AUTH})
    with urllib.request.urlopen(req) as response:
        return response.read()


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "AKIDPYTEST",
        "AWS_SECRET_ACCESS_KEY": "py-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(key, value)
    name = f"py-{uuid.uuid4().hex[:12]}"
    request("PUT", f"/{name}")
    return name


def test_convert_writes_and_reads_objects(bucket: str, fixtures: pathlib.Path, tmp_path: pathlib.Path) -> None:
    source = fixtures / "reference" / "all_dtypes.safetensors"
    url = f"s3://{bucket}/dir/model.safetensors"
    report = sts.convert(source, url)
    assert report["ok"] and [o["path"] for o in report["outputs"]] == [url]
    assert request("GET", f"/{bucket}/dir/model.safetensors") == source.read_bytes()

    # Sharded, to objects: the index last; then read back through the index object.
    sharded = f"s3://{bucket}/sharded/model.safetensors"
    report = sts.convert(url, sharded, max_shard_size=100)
    assert report["outputs"][-1]["path"].endswith(".index.json")
    back = tmp_path / "back.safetensors"
    sts.convert(f"s3://{bucket}/sharded/model.safetensors.index.json", back, sync=False)
    assert back.read_bytes() == source.read_bytes()

    # A dry run reads the object's header only, and names the objects it would write.
    plan = sts.convert(url, f"s3://{bucket}/again/model.safetensors", max_shard_size=100, dry_run=True)
    assert plan["ok"] and plan["tensors"] == report["tensors"]
    assert request("GET", f"/{bucket}?list-type=2&prefix=again/").count(b"<Key>") == 0


def test_object_errors_are_typed_and_name_the_url(bucket: str, fixtures: pathlib.Path) -> None:
    source = fixtures / "reference" / "all_dtypes.safetensors"
    missing = "s3://no-such-bucket-py/x.safetensors"
    with pytest.raises(sts.EnvironmentIOError) as raised:
        sts.convert(source, missing)
    assert raised.value.output == missing and raised.value.kind == "object_store"
    with pytest.raises(sts.UsageError):
        sts.convert(source, f"s4://{bucket}/x.safetensors")
