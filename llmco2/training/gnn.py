"""The LLMCO2 regressor (paper §4.1, §5.1): GraphSAGE over the layer's kernel graph, pooling,
global features concatenated, two linear layers predicting prefill and decode energy.

The network predicts, per phase, the log-ratio of energy to a physics prior (see
:mod:`llmco2.prediction.targets`), in standardised units; :class:`EnergyTarget` turns it back into
joules.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_max_pool, global_mean_pool


class LLMCO2Net(nn.Module):
    """GraphSAGE (``num_layers`` x ``SAGEConv``) -> mean+max pooling -> [pooled, globals] -> MLP.

    Args:
        node_dim: node feature width (both phases' features and the kernel one-hot).
        global_dim: global feature width.
        hidden: width of the SAGE layers and the head.
        num_layers: SAGE layers (the paper uses two).
        out_dim: outputs (2: prefill and decode).
        dropout: dropout in the head.
        use_graph: ``False`` drops the graph branch (a global-features-only ablation).
    """

    def __init__(self, node_dim: int, global_dim: int, hidden: int = 128, num_layers: int = 2, out_dim: int = 2,
                 dropout: float = 0.0, use_graph: bool = True) -> None:
        super().__init__()
        self.use_graph = use_graph
        self.convs = nn.ModuleList(SAGEConv(node_dim if i == 0 else hidden, hidden) for i in range(num_layers))
        pooled = 2 * hidden if use_graph else 0
        self.head = nn.Sequential(
            nn.Linear(pooled + global_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()
        for layer in self.head:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, u: Tensor) -> Tensor:
        """``[num_graphs, out_dim]`` standardised log-ratio predictions."""
        parts = []
        if self.use_graph:
            h = x
            for conv in self.convs:
                h = torch.relu(conv(h, edge_index))
            size = u.shape[0]
            parts += [global_mean_pool(h, batch, size), global_max_pool(h, batch, size)]
        parts.append(u)
        return self.head(torch.cat(parts, dim=1))
