// Package cpuyield gives the calling thread's CPU to the other runnable
// threads of the host, for the polling waits of ranks that share CPUs
// (as OpenMPI's mpi_yield_when_idle).
package cpuyield
