"""Communication: the process group's queries and collectives, point-to-point exchanges, their autograd adjoints,
what every call sends (recorded and replayed), gradients reduced in fp32, the nodes of a world, and a fake group."""
