"""What one (micro-)step of `train` trains on: its length, what the policy plans, its tokens and labels.

Library module (runtime/train.py builds one `StepData` for --dataset and, for evaluation, one for
--eval-dataset). Step m of a dataset (a micro-step index: optimizer step i with --accumulate A trains
m = i*A .. i*A+A-1) is, in order of precedence: pack m of `--pack-tokens` (runtime/train_inputs.py
`PackedSteps`), a packed length file's own step m, the documents of a token file (`TokenDocuments`), or one
sequence per row of the workload's m-th length from the seeded Markov chain (runtime/train.py `_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.errors import UserInputError


@dataclass
class StepData:
    """The steps of one dataset at one world size (module docstring)."""

    opts: object
    """The run's `TrainOptions` (batch, seed, pack options)."""
    lengths: list
    """The workload's lengths (one per step; cycled)."""
    docs: object
    """`TokenDocuments` of a token file, or None (synthetic tokens)."""
    packs: object
    """`PackedSteps`, or None (one sequence per row)."""
    unit: int
    cap: int
    vocab: int
    seed_offset: int = 0
    """Added to the step index of the synthetic tokens (evaluation draws other sequences than training)."""

    @classmethod
    def build(cls, opts, dataset: str, size: int, unit: int, cap: int, vocab: int, p: int,
              seed_offset: int = 0) -> StepData:
        """The steps of `dataset` (a workload spec or a token file), `size` lengths drawn from the workload."""
        from paradyse_lab.workloads import get_workload
        from runtime.train_inputs import PackedSteps, TokenDocuments

        docs = TokenDocuments.from_options(opts, dataset)
        lengths = list(get_workload(dataset, size=size, seed=opts.seed).lengths) if docs is None else []
        packs = None
        if opts.pack_tokens is not None:
            packs = PackedSteps.build(opts, lengths, docs, cap, p)
        elif docs is None:
            file_packs = get_workload(dataset, size=size, seed=opts.seed).packs
            if file_packs is not None:
                if opts.batch != 1:
                    raise UserInputError(f"--batch must be 1 with a packed length file (a step is one pack), got "
                                         f"{opts.batch}")
                packs = PackedSteps.from_file_steps(file_packs, cap, p)
        return cls(opts, lengths, docs, packs, unit, cap, vocab, seed_offset)

    @property
    def period(self) -> int:
        """Steps before the data repeats."""
        if self.packs is not None:
            return len(self.packs.packs)
        return len(self.docs.docs) if self.docs is not None else len(self.lengths)

    def length(self, m: int) -> int:
        """The (padded) sequence length of step m."""
        if self.packs is not None:
            return self.packs.pack(m).seq_len
        if self.docs is not None:
            return self.docs.length(m, self.opts.batch, self.unit, self.cap)
        return max(self.unit, min(self.lengths[m % len(self.lengths)], self.cap) // self.unit * self.unit)

    def planned(self, m: int):
        """What the policy plans: the step's length, or its pack's documents (a `PackedStep`, whose cost is
        per document: paradyse_lab/costmodel/packed.py), never the pack as one sequence of its padded length."""
        from paradyse_lab.costmodel.packed import PackedStep

        if self.packs is not None:
            return PackedStep(self.packs.pack(m).lengths, self.unit)
        return self.length(m)

    def targets(self, m: int) -> int:
        """Positions of step m whose next token the loss predicts."""
        if self.packs is not None:
            return sum(n - 1 for n in self.packs.pack(m).lengths)
        if self.docs is not None:
            return self.docs.targets(m, self.opts.batch, self.length(m))
        return self.opts.batch * (self.length(m) - 1)

    def documents(self, m: int) -> int:
        """Documents (rows, or a pack's documents) in step m."""
        return len(self.packs.pack(m).lengths) if self.packs is not None else self.opts.batch

    def tokens(self, m: int) -> int:
        """Tokens step m trains on (padding left out): each document's targets and its last token."""
        return self.targets(m) + self.documents(m)

    def cut(self, m: int) -> int:
        """Tokens of step m's documents it does not train: beyond --max-len or the model's positions (the cap),
        or beyond the cap rounded down to the layout unit 2p (a workload length rounded down too)."""
        if self.packs is not None:
            return self.packs.cut(m)
        s = self.length(m)
        if self.docs is not None:
            return sum(max(0, len(r) - s) for r in self.docs.rows(m, self.opts.batch))
        return self.opts.batch * max(0, int(self.lengths[m % len(self.lengths)]) - s)

    def batch(self, m: int):
        """([b, s] token ids, [b, s] next-token labels, -100 where nothing is predicted; cu_seqlens of a pack or
        None)."""
        import torch

        from runtime.train import _tokens

        s = self.length(m)
        if self.packs is not None:
            pack = self.packs.pack(m)
            tokens = (self.packs.tokens(m, self.vocab) if self.docs is not None
                      else _tokens(self.opts, m + self.seed_offset, 1, s, self.vocab))
            return tokens, pack.labels(tokens), pack.cu_seqlens  # host offsets; -100 at doc ends, padding
        if self.docs is not None:
            tokens, labels = self.docs.batch(m, self.opts.batch, s, self.vocab)
            return tokens, labels, None
        tokens = _tokens(self.opts, m + self.seed_offset, self.opts.batch, s, self.vocab)
        labels = torch.cat([tokens[:, 1:], torch.full((self.opts.batch, 1), -100)], dim=1)  # next-token targets
        return tokens, labels, None
