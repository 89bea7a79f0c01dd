"""The planted-secret corpus: every place a capture can hold a secret, every byte of the bundle checked.

The capture is SYNTHETIC (tests/synthetic_captures.py; real formats, made-up values). Secrets
are planted in the training command line (every flag form), the arms' differing commands (so
they reach report.md and evidence.json through the NOT COMPARABLE reasons), the environment,
the manifest (a PEM private key, list values under a secret key, URL credentials), the raw
sites.jsonl header, a raw cuBLASLt line (``auth=...``) and the capture directory's own name.
None may survive anywhere: not in a member, not in a member name, not in the tar stream's
headers, not in the gzip stream or its header; and what is structured must still parse.
"""
from __future__ import annotations

import gzip
import json
import tarfile
import zlib
from pathlib import Path

import pytest
import yaml

from forensics.cli import main
from forensics.evidence.bundle import write_bundle
from forensics.core.redact import REDACTED, Redactor, is_secret_key
from tests.synthetic_captures import Arm, Gemm, build_capture

SECRETS = {  # value -> where it is planted (every value is made up)
    "ApiKeyPlanted0001": "--api-key X (space-separated, in the command)",
    "TokenPlanted00002": "--token X",
    "PasswordPlanted03": "--password X",
    "SecretPlanted0004": "--secret X",
    "ShortPw5": "-p X",
    "AuthPlanted000006": "--auth X",
    "BearerPlanted0007": "--header 'Authorization: Bearer X'",
    "EqualsPlanted0008": "--hf-token=X",
    "hf_PlantedHuggingFaceToken0123456789": "a token-shaped value in the capture directory's name",
    "RawLineAuth000009": "auth=X inside a raw cuBLASLt [Trace] line",
    "ListSecretA000010": "list value under a secret key (credentials: [...])",
    "ListSecretB000011": "second list value under a secret key",
    "EnvSecret00000012": "HF_TOKEN in an arm's env",
    "UrlPassword000013": "password in a URL (PIP_INDEX_URL)",
    "HeaderArgv0000014": "--token X in the sites.jsonl header's argv",
    "EnvJsonSecret0015": "WANDB_API_KEY in environment.json",
    "ArmCmdSecret00016": "--token X in arm a2's own command (reaches NOT COMPARABLE reasons)",
    "MIIEpAIBAAKCAQEAplantedPEMbody0017": "the body of a PEM private key in the manifest",
}
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAplantedPEMbody0017\n"
       "c2Vjb25kUEVNbGluZXBsYW50ZWQ=\n-----END RSA PRIVATE KEY-----\n")
DIR_NAME = "run-hf_PlantedHuggingFaceToken0123456789"
COMMAND = ["torchrun", "--nproc-per-node", "1", "train.py", "--api-key", "ApiKeyPlanted0001", "--token",
           "TokenPlanted00002", "--password", "PasswordPlanted03", "--secret", "SecretPlanted0004", "-p", "ShortPw5",
           "--auth", "AuthPlanted000006", "--header", "Authorization: Bearer BearerPlanted0007",
           "--hf-token=EqualsPlanted0008", "--lr", "0.1"]


def _plant(cap: Path) -> None:
    manifest = yaml.safe_load((cap / "manifest.yaml").read_text())
    manifest["command"] = COMMAND
    manifest["credentials"] = ["ListSecretA000010", "ListSecretB000011"]
    manifest["notes"] = {"deploy_key_material": PEM, "site_filter": "gemm:NT:acc0:grad1"}
    manifest["description"] = "ssh key follows\n" + PEM
    for arm in manifest["arms"]:
        arm["env"]["HF_TOKEN"] = "EnvSecret00000012"
        arm["env"]["PIP_INDEX_URL"] = "https://builder:UrlPassword000013@pypi.internal.example/simple"
        if arm["name"] == "a2":
            arm["command"] = "python train.py --token ArmCmdSecret00016"
        else:
            arm["command"] = "python train.py --token TokenPlanted00002"
    (cap / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    for sites in cap.glob("*/rank*/sites.jsonl"):
        lines = sites.read_text().splitlines()
        header = json.loads(lines[0])
        header.update(argv=["train.py", "--token", "HeaderArgv0000014"], site_filter="gemm:NT:acc0:grad1")
        sites.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    for log in cap.glob("*/rank*/cublaslt.*.log"):
        text = log.read_text().replace("outOfPlace=0 stream=0X0", "outOfPlace=0 stream=0X0 auth=RawLineAuth000009")
        log.write_text(text)
    for env in cap.glob("*/rank*/environment.json"):
        data = json.loads(env.read_text())
        data["env"] = {**(data.get("env") or {}), "WANDB_API_KEY": "EnvJsonSecret0015"}
        env.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    mp = pytest.MonkeyPatch()
    mp.setenv("FORENSICS_CRASH_DIR", str(root / "crashes"))
    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512, diverge_in=("a2",))]  # SYNTHETIC
    cap = build_capture(root / DIR_NAME, gemms, [Arm("a1"), Arm("a2")])
    _plant(cap)
    raw_lt = "".join(p.read_text() for p in cap.glob("*/rank*/cublaslt.*.log"))
    assert "auth=RawLineAuth000009" in raw_lt and "[Trace][cublasLtMatmul]" in raw_lt
    out = root / "evidence.tar.gz"
    assert main(["bundle", str(cap), "-o", str(out)]) == 0
    blob = out.read_bytes()
    stream = gzip.decompress(blob)
    with tarfile.open(out) as tar:
        infos = tar.getmembers()
        members = {m.name: tar.extractfile(m).read() for m in infos if m.isfile()}
    mp.undo()
    return {"cap": cap, "blob": blob, "stream": stream, "infos": infos, "members": members}


def test_the_planted_values_reach_the_raw_members_before_redaction(planted):
    """The corpus is meaningful: the bundle carries the raw lines and header that held secrets."""
    names = [n.split("/", 1)[1] for n in planted["members"]]
    assert "raw/a1/rank0/sites.jsonl" in names and any(n.startswith("raw/a1/rank0/cublaslt.") for n in names)
    report = next(v for k, v in planted["members"].items() if k.endswith("report.md")).decode()
    assert "NOT COMPARABLE" in report and "command differs" in report  # the arms' commands are shown (redacted)


@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_no_planted_secret_in_any_byte(planted, secret):
    needle = secret.encode()
    assert needle not in planted["blob"], f"{SECRETS[secret]}: in the .tar.gz bytes"
    assert needle not in planted["stream"], f"{SECRETS[secret]}: in the tar stream (headers, names, pax, data)"
    for name, data in planted["members"].items():
        assert needle not in name.encode(), f"{SECRETS[secret]}: in member name {name}"
        assert needle not in data, f"{SECRETS[secret]}: in member {name}"
        if name.endswith(".png"):
            assert needle not in zlib.decompress(_png_idat(data)), f"{SECRETS[secret]}: in the PNG"


def test_pem_markers_and_second_line_are_gone(planted):
    for marker in (b"BEGIN RSA PRIVATE KEY", b"c2Vjb25kUEVNbGluZXBsYW50ZWQ="):
        assert marker not in planted["stream"]


def test_gzip_header_carries_no_file_name(planted):
    blob = planted["blob"]
    assert blob[:2] == b"\x1f\x8b"
    flags = blob[3]
    assert not flags & 0x08, "FNAME set in the gzip header"
    assert not flags & 0x10, "FCOMMENT set in the gzip header"


def test_structured_members_still_parse_and_keep_what_is_not_secret(planted):
    files = {k.split("/", 1)[1]: v for k, v in planted["members"].items()}
    manifest = yaml.safe_load(files["manifest.yaml"])  # still valid YAML
    assert manifest["credentials"] == REDACTED
    assert manifest["notes"]["site_filter"] == "gemm:NT:acc0:grad1"  # a key that merely contains a word
    assert manifest["arms"][0]["env"]["HF_TOKEN"] == REDACTED
    assert manifest["arms"][0]["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "--lr" in manifest["command"] and "0.1" in manifest["command"]
    assert manifest["command"][manifest["command"].index("--token") + 1] == REDACTED
    evidence = json.loads(files["evidence.json"])
    assert evidence["site"] == "gemm:NT:acc0:grad1"
    header = json.loads(files["raw/a1/rank0/sites.jsonl"].splitlines()[0])
    assert header["site_filter"] == "gemm:NT:acc0:grad1" and header["argv"][2] == REDACTED
    for name, data in files.items():
        if name.endswith(".jsonl"):
            for line in data.decode().splitlines():
                json.loads(line)
    compile(files["repro.py"].decode(), "repro.py", "exec")
    lt = next(v for k, v in files.items() if "cublaslt." in k).decode()
    assert "auth=<redacted>" in lt and "[Trace][cublasLtMatmul]" in lt


def test_top_folder_and_member_names_are_redacted(planted):
    tops = {i.name.split("/")[0] for i in planted["infos"]}
    assert len(tops) == 1
    top = tops.pop()
    assert top.startswith("forensics-bundle-run-") and "hf_" not in top


def _png_idat(data: bytes) -> bytes:
    """Concatenated IDAT chunks of a PNG (the compressed pixels)."""
    out, i = b"", 8
    while i < len(data):
        length = int.from_bytes(data[i:i + 4], "big")
        kind = data[i + 4:i + 8]
        if kind == b"IDAT":
            out += data[i + 8:i + 8 + length]
        i += 12 + length
    return out


# --------------------------------------------------------------------------- the rules themselves
@pytest.mark.parametrize("key", ["site_filter", "max_tokens", "tokenizer", "author", "bypass", "passes", "sort_key",
                                 "public_key", "keyboard", "num_tokens", "cache_key"])
def test_keys_that_merely_contain_a_word_are_kept(key):
    assert not is_secret_key(key)
    red = Redactor().learn({key: "value-kept-123"})
    assert red.obj({key: "value-kept-123"}) == {key: "value-kept-123"}


@pytest.mark.parametrize("key", ["HF_TOKEN", "WANDB_API_KEY", "password", "db-pass", "AccountKey", "auth",
                                 "Authorization", "client_secret", "credentials", "x-api-key", "OPENAI_KEY",
                                 "sessionId", "SENTRY_DSN"])
def test_secret_keys_lose_their_whole_value(key):
    assert is_secret_key(key)
    assert Redactor().obj({key: ["a", {"b": "c"}]}) == {key: REDACTED}


def test_a_surviving_secret_fails_closed(tmp_path, monkeypatch):
    """If redaction ever misses, the bundle is not written (internal error), never written with the secret."""
    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512)]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1")])
    _plant(cap)
    monkeypatch.setattr(Redactor, "text", lambda self, text: text)  # a broken redactor
    monkeypatch.setenv("FORENSICS_CRASH_DIR", str(tmp_path / "crashes"))
    assert main(["bundle", str(cap), "-o", str(tmp_path / "b.tar.gz")]) == 70
    assert not (tmp_path / "b.tar.gz").exists()
