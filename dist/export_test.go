package dist

// LentSends counts g's endpoint's sends that went by reference (tests).
func LentSends(g *Group) int64 { return g.world.ep.LentSends() }

// SharedAllReduces counts g's all-reduces that went through shared memory.
func SharedAllReduces(g *Group) int64 { return g.sharedReduces.Load() }
