"""The model and its layout: `ParallelGPT`, the single-device reference, the zig-zag layout of the sequence and
the weights' shards, one sub-layer as one autograd node, rotary embeddings, packed documents, the vocabulary-parallel
embedding and head, the tiled loss."""
