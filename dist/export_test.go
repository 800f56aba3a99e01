package dist

// SharedAllReduces counts g's all-reduces that went through shared memory.
func SharedAllReduces(g *Group) int64 { return g.sharedReduces.Load() }
