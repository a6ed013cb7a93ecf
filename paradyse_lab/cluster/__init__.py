"""The cluster description: `ClusterSpec`, its presets, cluster TOML files and names, and clusters fitted from
measurements."""
