package dist

// LentSends counts g's endpoint's sends that went by reference (tests).
func LentSends(g *Group) int64 { return g.world.ep.LentSends() }
