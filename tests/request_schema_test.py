#!/usr/bin/env python3
"""request_schema_test.py - docs/request.schema.json against docs/requests.md: the schema is a
valid JSON Schema (draft 2020-12), every ```json example of the specification satisfies it, and
documents the specification refuses for their shape (an unknown field, a section of another
method, a tensor of another dtype, ...) do not.

usage: request_schema_test.py SOURCE_DIR"""
import json
import re
import sys

import jsonschema


def main():
    root = sys.argv[1]
    schema = json.load(open(f"{root}/docs/request.schema.json"))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    md = open(f"{root}/docs/requests.md").read()
    examples = re.findall(r"^```json\n(.*?)^```", md, re.S | re.M)
    failures = 0
    if len(examples) < 5:
        print(f"only {len(examples)} examples found in docs/requests.md")
        failures += 1
    for i, text in enumerate(examples, 1):
        errors = [e.message for e in v.iter_errors(json.loads(text))]
        if errors:
            print(f"example {i} does not satisfy the schema: {errors[0]}")
            failures += 1
    edit = lambda e: {"nnt_request": 1, "edits": [e]}
    refused = {
        "no version": {},
        "version 2": {"nnt_request": 2},
        "unknown field": {"nnt_request": 1, "frob": 1},
        "a lens section in a trace": {"nnt_request": 1, "lens": {}},
        "generate without its section": {"nnt_request": 1, "method": "generate"},
        "a patch with rows": {"nnt_request": 1, "method": "patch", "rows": [],
                              "patch": {"clean": {"tokens": [1]}, "corrupt": {"tokens": [2]}, "metric": "prob:1"}},
        "steps in a trace": edit({"op": "steps", "from": 1}),
        "a save in a lens": {"nnt_request": 1, "method": "lens", "edits": [{"op": "save", "path": "logits"}]},
        "a row of two kinds": {"nnt_request": 1, "rows": [{"tokens": [1], "text": "a"}]},
        "a negative id": {"nnt_request": 1, "rows": [{"tokens": [-1]}]},
        "a fractional factor field": edit({"op": "ablate_expert", "layer": 1.5, "expert": 0}),
        "a factor out of range": edit({"op": "scale", "path": "logits", "factor": 2e6}),
        "an unknown edit field": edit({"op": "scale", "path": "logits", "factor": 1, "fator": 2}),
        "rows on skip_layers": edit({"op": "skip_layers", "start": 0, "end": 0, "rows": [0]}),
        "repeated rows": edit({"op": "zero", "path": "logits", "rows": [1, 1]}),
        "a position word": edit({"op": "steer", "first": 0, "tensor": {"key": "v"}, "positions": ["last"]}),
        "a mixed tensor": edit({"op": "set", "path": "p", "tensor": {"file": "v.safetensors", "dtype": "F32"}}),
        "a tensor dtype": edit({"op": "set", "path": "p", "tensor": {"dtype": "F8_E4M3", "shape": [1], "data": [1]}}),
        "a metric": {"nnt_request": 1, "method": "patch",
                     "patch": {"clean": {"tokens": [1]}, "corrupt": {"tokens": [2]}, "metric": "kl"}},
        "top_p 0": {"nnt_request": 1, "method": "generate", "generate": {"max_new_tokens": 1, "top_p": 0}},
        "generated in a lens": {"nnt_request": 1, "method": "lens", "lens": {"positions": ["generated"]}},
        "grad in a generation": {"nnt_request": 1, "method": "generate", "generate": {"max_new_tokens": 1},
                                 "grad": {"paths": ["logits"], "metric": "loss"}},
        "grad without a scalar": {"nnt_request": 1, "grad": {"paths": ["logits"]}},
        "an attribute with rows": {"nnt_request": 1, "method": "attribute", "rows": [],
                                   "attribute": {"clean": {"tokens": [1]}, "corrupt": {"tokens": [2]},
                                                 "metric": "prob:1"}},
    }
    sae = "layers.1.layer_output.sae.feature_acts"
    refused.update({
        "features on a plain value": edit({"op": "zero", "path": "logits", "features": [1]}),
        "a feature edit without features": edit({"op": "zero", "path": sae}),
        "a set of features": edit({"op": "set", "path": sae, "tensor": {"key": "v"}}),
        "a feature fill with a mask": edit({"op": "masked_fill", "path": sae, "features": [1], "fill": 0,
                                            "where": "logits", "equals": 1}),
        "an edit of an SAE's error": edit({"op": "zero", "path": "layers.1.layer_output.sae.error"}),
        "rows on an SAE output's save": edit({"op": "save", "path": "layers.1.layer_output.sae.error", "rows": [0]}),
        "an sae without its folder": {"nnt_request": 1, "saes": [{"path": "layers.1.layer_output"}]},
        "saes in a patch": {"nnt_request": 1, "method": "patch", "saes": [],
                            "patch": {"clean": {"tokens": [1]}, "corrupt": {"tokens": [2]}, "metric": "prob:1"}},
    })
    accepted = {"an SAE with feature edits and saves of its outputs": {
        "nnt_request": 1, "rows": [{"tokens": [1, 2, 3]}],
        "saes": [{"path": "layers.1.layer_output", "dir": "sae/relu"}],
        "edits": [{"op": "zero", "path": sae, "features": [3, 10]},
                  {"op": "scale", "path": sae, "features": [5], "factor": 3},
                  {"op": "masked_fill", "path": sae, "features": [7], "fill": 2.5},
                  {"op": "save", "path": "layers.1.layer_output.sae.error"}],
        "saves": [sae, "layers.1.layer_output.sae.reconstruction", "logits"]}}
    for what, doc in accepted.items():
        errors = [e.message for e in v.iter_errors(doc)]
        if errors:
            print(f"the schema refuses {what}: {errors[0]}")
            failures += 1
    for what, doc in refused.items():
        if v.is_valid(doc):
            print(f"the schema accepts {what}: {json.dumps(doc)}")
            failures += 1
    print(f"request schema: {len(examples)} examples, {len(refused)} refused documents, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
