"""saelens_check.py - checks that SAELens reads what nnt.harvest's to_dataset writes: harvests the
tiny example's layers.1.layer_output over the committed corpus, writes it as a `datasets` folder,
opens it with SAELens's ActivationsStore (cached_activations_path) and draws a buffer through the
store's own loader, which must hold the harvested values and token ids row for row. Needs sae-lens
and datasets from PyPI (tests/harvest/requirements.txt), so it is not part of ctest (CI has no
torch); run from the source tree after a build:
    PYTHONPATH=python NNT_LIBRARY=build/libnnt.so.0.2.0 python3 tests/harvest/saelens_check.py"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from sae_lens.training.activations_store import ActivationsStore

import nnt

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("NNT_CLI", os.path.join(SOURCE, "build", "nnt"))
T = 16


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out, ds_path = os.path.join(tmp, "h"), os.path.join(tmp, "ds")
        subprocess.run([CLI, "harvest", "--model", os.path.join(SOURCE, "examples", "tiny-minimax-m2"), "--data",
                        os.path.join(SOURCE, "tests", "fixtures", "corpus", "corpus.txt"), "--context", str(T),
                        "--dtype", "f32", "--save", "layers.1.layer_output", "--max-tokens", "4096", "--out", out],
                       check=True)
        h = nnt.harvest.open(out)
        hook = "blocks.1.hook_resid_post"
        h.to_dataset(ds_path, hook_name=hook)
        x, ids = h["layers.1.layer_output"][:], h.input_ids[:]
        rows, d = len(x) // T, x.shape[1]
        store = ActivationsStore(model=None, dataset=None, streaming=False, hook_name=hook, hook_head_index=None,
                                 context_size=T, d_in=d, n_batches_in_buffer=2, total_training_tokens=rows * T,
                                 store_batch_size_prompts=4, train_batch_size_tokens=32, prepend_bos=False,
                                 normalize_activations="none", device=torch.device("cpu"), dtype="float32",
                                 cached_activations_path=ds_path)
        acts, toks = store.get_raw_llm_batch()
        n = acts.shape[0]
        assert n == 4 * T, acts.shape
        np.testing.assert_array_equal(acts.reshape(n, d).numpy(), x[:n])
        np.testing.assert_array_equal(toks.numpy(), ids[:n])
        acts2, _ = store.get_raw_llm_batch()  # the store moves on to the next rows
        np.testing.assert_array_equal(acts2.reshape(n, d).numpy(), x[n:2 * n])
        import sae_lens

        print(f"sae-lens {sae_lens.__version__}: ActivationsStore read {rows} rows of [{T}, {d}] from to_dataset's "
              f"folder; two batches of {n} tokens equal the harvest's values and ids")


if __name__ == "__main__":
    sys.exit(main())
