"""`LayerGraph`: the transformer as a networkx DiGraph, the structure solvers decide over.

Nodes: `embedding` -> (`attn.0`, `mlp.0`) ... (`attn.{L-1}`, `mlp.{L-1}`) -> `head` (docs/design.md section 3).
At block granularity one decision covers a block's attention and MLP (the paper); at sub-layer granularity
attention and MLP decide separately. Decision nodes carry `kind` ('attention' | 'mlp' | 'block'),
`layer` (block index) and `decision` (index of the decision variable); embedding and head carry
`kind` 'embedding' / 'head' and no decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import unknown_name

GRANULARITIES = ("block", "sublayer")
SUBLAYER_KINDS = ("attention", "mlp")


@dataclass(frozen=True)
class Decision:
    """One strategy choice of a plan: a block, or one sub-layer of a block."""

    index: int
    """Position in the plan."""
    layer: int
    """Block index."""
    sublayers: tuple[str, ...]
    """The sub-layer kinds this decision covers: ('attention', 'mlp') for a block."""

    @property
    def label(self) -> str:
        """`L3` for block 3, `L3.attn` / `L3.mlp` for its sub-layers."""
        if len(self.sublayers) == 2:
            return f"L{self.layer}"
        return f"L{self.layer}.{'attn' if self.sublayers[0] == 'attention' else 'mlp'}"


class LayerGraph:
    """The model as a chain DiGraph of sub-layers, with the decisions a plan makes over it."""

    def __init__(self, model: ModelSpec, granularity: str = "block"):
        if granularity not in GRANULARITIES:
            raise unknown_name("granularity", granularity, GRANULARITIES)
        self.model = model
        self.granularity = granularity
        import networkx as nx  # networkx: ~1 s of start-up for every process that plans

        self.graph = nx.DiGraph()
        self.decisions: list[Decision] = []
        self._order: tuple[str, ...] | None = None
        self.graph.add_node("embedding", kind="embedding")
        prev = "embedding"
        for layer in range(model.layers):
            if granularity == "block":
                self.decisions.append(Decision(len(self.decisions), layer, SUBLAYER_KINDS))
            for kind in SUBLAYER_KINDS:
                if granularity == "sublayer":
                    self.decisions.append(Decision(len(self.decisions), layer, (kind,)))
                node = f"{'attn' if kind == 'attention' else 'mlp'}.{layer}"
                self.graph.add_node(node, kind=kind, layer=layer, decision=self.decisions[-1].index)
                self.graph.add_edge(prev, node)
                prev = node
        self.graph.add_node("head", kind="head")
        self.graph.add_edge(prev, "head")

    @property
    def num_decisions(self) -> int:
        """Length of a plan over this graph."""
        return len(self.decisions)

    def sublayer_nodes(self) -> list[str]:
        """Attention and MLP nodes in execution order (sorted once: every search problem reads it)."""
        if self._order is None:
            import networkx as nx  # networkx: off the module top, as in __init__

            self._order = tuple(n for n in nx.topological_sort(self.graph)
                                if self.graph.nodes[n]["kind"] in SUBLAYER_KINDS)
        return list(self._order)

    def decision_edges(self) -> list[tuple[int, int]]:
        """Pairs (d, d') of consecutive decisions: where a strategy switch can cost something."""
        order = [self.graph.nodes[n]["decision"] for n in self.sublayer_nodes()]
        return [(a, b) for a, b in zip(order, order[1:]) if a != b]

    def __repr__(self) -> str:
        return (f"LayerGraph({self.model.name}, {self.granularity}, {self.graph.number_of_nodes()} nodes, "
                f"{self.num_decisions} decisions)")
