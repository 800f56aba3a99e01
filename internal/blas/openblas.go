//go:build openblas

package blas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"fmt"
	"os"
	"sync"

	"github.com/godist/godist/internal/blas/internal/gogemm"
	"github.com/godist/godist/internal/cgobusy"
)

// openblasImpl binds OpenBLAS's cblas_sgemm/cblas_dgemm through cgo.
type openblasImpl struct{}

var openblasInit sync.Once

func defaultImpl() Impl {
	openblasInit.Do(func() {
		// One thread unless the user asked otherwise: the callers
		// parallelise at a coarser level. OPENBLAS_NUM_THREADS is
		// OpenBLAS's own setting, which the C library reads itself when
		// it loads; reading it here only keeps this default from
		// overriding it, and so changes nothing the user did not ask
		// OpenBLAS for.
		if os.Getenv("OPENBLAS_NUM_THREADS") == "" {
			C.openblas_set_num_threads(1)
		}
	})
	return openblasImpl{}
}

// buildInfo describes the OpenBLAS library in use.
func buildInfo() string {
	return fmt.Sprintf("openblas: core=%s threads=%d config=%q", C.GoString(C.openblas_get_corename()), int(C.openblas_get_num_threads()), C.GoString(C.openblas_get_config()))
}

func (openblasImpl) Name() string { return "openblas" }

func trans(t bool) C.enum_CBLAS_TRANSPOSE {
	if t {
		return C.CblasTrans
	}
	return C.CblasNoTrans
}

func (openblasImpl) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gogemm.Check("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		gogemm.ScaleS(m, n, beta, c, ldc)
		return
	}
	cgobusy.Enter()
	defer cgobusy.Exit()
	C.cblas_sgemm(C.CblasRowMajor, trans(transA), trans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

func (openblasImpl) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gogemm.Check("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		gogemm.ScaleD(m, n, beta, c, ldc)
		return
	}
	cgobusy.Enter()
	defer cgobusy.Exit()
	C.cblas_dgemm(C.CblasRowMajor, trans(transA), trans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.double(alpha), (*C.double)(&a[0]), C.blasint(lda), (*C.double)(&b[0]), C.blasint(ldb),
		C.double(beta), (*C.double)(&c[0]), C.blasint(ldc))
}
