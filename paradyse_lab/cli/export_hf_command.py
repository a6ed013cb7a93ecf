"""`paradyse-lab export-hf --checkpoint DIR --out HF_DIR`: a training checkpoint as a Hugging Face model folder.

    paradyse-lab train --nproc 2 --init-from llama-folder --dataset file:tokens.jsonl --checkpoint-dir ck
    paradyse-lab export-hf --checkpoint ck --out llama-finetuned     # newest checkpoint in ck
    python -c "import transformers; transformers.AutoModelForCausalLM.from_pretrained('llama-finetuned')"

The checkpoint may come from any world size; the folder holds config.json and the weights as safetensors.
Bad input (no checkpoint there, a damaged one, an --out that is not a new or empty
folder, a bad --max-shard-size) is one line on stderr and exit 2, and nothing is written.
"""

from __future__ import annotations

import argparse

from paradyse_lab.cli import descriptions


def register(subparsers) -> None:
    """Add the `export-hf` sub-command (imports no torch until it runs)."""
    parser = subparsers.add_parser("export-hf", help="write a training checkpoint as a Hugging Face model folder",
                                   description=descriptions.EXPORT_HF,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="a checkpoint (DIR/step-N) or a --checkpoint-dir (its newest checkpoint)")
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write (new or empty)")
    parser.add_argument("--max-shard-size", default="5GB",
                        help="largest safetensors file before the weights are split into shards with an index "
                             "(e.g. 5GB, 200MB; default 5GB)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paradyse_lab.runtime.hf.export import export_hf, parse_size  # lazy: safetensors: only checkpoint paths need it

    limit = parse_size(args.max_shard_size)
    done = export_hf(args.checkpoint, args.out, limit)
    print(f"wrote {done['out']} ({', '.join(done['files'])}) from {done['checkpoint']} (step {done['step']}, "
          f"written by {done['world_size']} ranks)")
    return 0
