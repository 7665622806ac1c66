"""test_tokenizer.py - nnt.Tokenizer loads through a runtime, with the hints of the family plugin
serving the folder's config.json: Kimi-Linear's tiktoken folder (Qwen3.6's ranks, from
tests/fixtures/tokenizer/vocabularies.tar.xz) gives the ids tiktoken gave for Kimi's tokenization
code (kimi_qwen3_6.json) only with its family, and the nnt command gives the same ids."""

import json
import os
import shutil
import tarfile

import pytest

import nnt
from conftest import FIXTURES, run_cli

VOCAB = os.path.join(FIXTURES, "tokenizer", "vocabularies.tar.xz")
REFERENCE = os.path.join(FIXTURES, "tokenizer", "kimi_qwen3_6.json")


@pytest.fixture(scope="module")
def kimi_folders(tmp_path_factory):
    """(bare, with_config): the archive's kimi_qwen3_6 folder as it is, and a copy with a
    config.json naming KimiLinearForCausalLM."""
    root = tmp_path_factory.mktemp("kimi_tokenizer")
    with tarfile.open(VOCAB) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("kimi_qwen3_6/") and m.isfile()]
        for m in members:
            with tar.extractfile(m) as src, open(root / os.path.basename(m.name), "wb") as dst:
                shutil.copyfileobj(src, dst)
    bare = root
    with_config = tmp_path_factory.mktemp("kimi_release")
    for name in ("tiktoken.model", "tokenizer_config.json"):
        os.symlink(bare / name, with_config / name)
    (with_config / "config.json").write_text(json.dumps({"architectures": ["KimiLinearForCausalLM"]}))
    return str(bare), str(with_config)


def reference_cases():
    with open(REFERENCE, encoding="utf-8") as f:
        return json.load(f)["cases"]


def test_family_hints_give_the_reference_ids(kimi_folders):
    tok = nnt.Tokenizer(kimi_folders[1])
    assert tok.kind == "tiktoken"
    cases = reference_cases()
    assert len(cases) > 100
    for case in cases:
        text = bytes.fromhex(case["text_hex"])
        assert tok.encode(text, add_special=False) == case["ids"], case["name"]


def test_without_the_family_no_split_pattern(kimi_folders):
    with pytest.raises(nnt.Error) as e:
        nnt.Tokenizer(kimi_folders[0])
    assert "a tiktoken vocabulary without a split pattern" in str(e.value)
    assert "a family plugin can" in str(e.value)


def test_cli_tokenize_uses_the_family(kimi_folders):
    case = next(c for c in reference_cases() if c["name"] == "han_mixed_ascii")
    text = bytes.fromhex(case["text_hex"]).decode("utf-8")
    out = run_cli("tokenize", "--model", kimi_folders[1], "--ids", "--no-special", text).stdout.split()
    assert [int(x) for x in out] == case["ids"]
    assert nnt.Tokenizer(kimi_folders[1]).encode(text, add_special=False) == case["ids"]


def test_model_tokenizer_is_the_models(example_prompt):
    """A Model's tokenizer is the one the model keeps (nnt_model_tokenizer): it gives what a
    Tokenizer of the same folder gives, and keeps the model alive while it is held."""
    from conftest import EXAMPLE

    want = nnt.Tokenizer(EXAMPLE).encode(example_prompt)
    tok = nnt.Model(EXAMPLE).tokenizer  # the Model object itself is dropped at once
    import gc

    gc.collect()
    assert tok.encode(example_prompt) == want
    assert tok._model is not None
