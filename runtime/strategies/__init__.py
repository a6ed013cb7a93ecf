"""The parallel strategies, one module each (its `ATTENTION`, `MLP` and `TILED_MLP`), registered by the
catalog entry that names the module; with the parts they share (ZeRO-3 weights, flat shards, the tiled MLP,
activation offload)."""
