package clustertest

import "golang.org/x/sys/unix"

// allowedCPUs lists the CPUs this process may run on, ascending.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var out []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}
