package dist

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Mesh arranges the members of a group in an n-dimensional grid, as
// PyTorch's DeviceMesh (init_device_mesh): group rank r sits at the
// coordinates of r in row-major order (the last dimension varies
// fastest), and each named dimension has the subgroup of the members that
// differ from this one in that coordinate only. Pipeline parallelism on
// one dimension and data parallelism on another compose this way: a mesh
// of shape (2, 2) named ("pp", "dp") over 4 ranks puts ranks 0 and 2 in
// one pipeline, ranks 0 and 1 in one data-parallel replica group.
type Mesh struct {
	group  *Group
	shape  []int
	names  []string
	coords []int
	dims   []*Group
}

// NewMesh builds a mesh of the given shape over g's members; the shape's
// product must be g's size and names must be distinct and non-empty, one
// per dimension. Every member of g must call it (it makes one subgroup
// per dimension, collectively).
func NewMesh(ctx context.Context, g *Group, shape []int, names []string) (*Mesh, error) {
	const op = "new_mesh"
	if len(shape) == 0 || len(shape) != len(names) {
		return nil, &InputError{op, fmt.Sprintf("shape %v and names %q: want one name per dimension, at least one dimension", shape, names)}
	}
	n := 1
	for i, s := range shape {
		if s < 1 {
			return nil, &InputError{op, fmt.Sprintf("dimension %q has size %d", names[i], s)}
		}
		n *= s
	}
	if n != g.Size() {
		return nil, &InputError{op, fmt.Sprintf("shape %v holds %d ranks, the group has %d", shape, n, g.Size())}
	}
	for i, name := range names {
		if name == "" || slices.Index(names, name) != i {
			return nil, &InputError{op, fmt.Sprintf("names %q: want distinct, non-empty names", names)}
		}
	}
	m := &Mesh{group: g, shape: slices.Clone(shape), names: slices.Clone(names)}
	m.coords = m.Coords(g.Rank())
	for d := range shape {
		// The members that share every other coordinate get the same
		// color: the row-major index of the coordinates without d.
		color := 0
		for i, c := range m.coords {
			if i != d {
				color = color*shape[i] + c
			}
		}
		sub, err := g.Split(ctx, color, m.coords[d])
		if err != nil {
			for _, made := range m.dims {
				made.Destroy()
			}
			return nil, fmt.Errorf("dist: mesh dimension %q: %w", names[d], err)
		}
		m.dims = append(m.dims, sub)
	}
	return m, nil
}

// Group returns the subgroup of the dimension name: the members that
// differ from this one only in that coordinate, ranked by it. It panics
// on a name the mesh does not have.
func (m *Mesh) Group(name string) *Group { return m.dims[m.dim(name)] }

// Coord returns this member's coordinate in the dimension name (its rank
// in Group(name)).
func (m *Mesh) Coord(name string) int { return m.coords[m.dim(name)] }

// Size returns the size of the dimension name.
func (m *Mesh) Size(name string) int { return m.shape[m.dim(name)] }

// Shape returns the mesh's shape.
func (m *Mesh) Shape() []int { return slices.Clone(m.shape) }

// Names returns the dimensions' names.
func (m *Mesh) Names() []string { return slices.Clone(m.names) }

// Parent returns the group the mesh was made over.
func (m *Mesh) Parent() *Group { return m.group }

// Coords returns the coordinates of the member with group rank r.
func (m *Mesh) Coords(r int) []int {
	c := make([]int, len(m.shape))
	for i := len(m.shape) - 1; i >= 0; i-- {
		c[i] = r % m.shape[i]
		r /= m.shape[i]
	}
	return c
}

// RankAt returns the group rank of the member at the given coordinates.
func (m *Mesh) RankAt(coords ...int) int {
	if len(coords) != len(m.shape) {
		panic(fmt.Sprintf("dist: %d coordinates for a mesh of %d dimensions", len(coords), len(m.shape)))
	}
	r := 0
	for i, c := range coords {
		if c < 0 || c >= m.shape[i] {
			panic(fmt.Sprintf("dist: coordinate %d of dimension %q out of [0, %d)", c, m.names[i], m.shape[i]))
		}
		r = r*m.shape[i] + c
	}
	return r
}

func (m *Mesh) dim(name string) int {
	i := slices.Index(m.names, name)
	if i < 0 {
		panic(fmt.Sprintf("dist: the mesh has no dimension %q (it has %s)", name, strings.Join(m.names, ", ")))
	}
	return i
}

func (m *Mesh) String() string {
	parts := make([]string, len(m.shape))
	for i := range m.shape {
		parts[i] = fmt.Sprintf("%s=%d", m.names[i], m.shape[i])
	}
	return "Mesh(" + strings.Join(parts, ", ") + ")"
}
