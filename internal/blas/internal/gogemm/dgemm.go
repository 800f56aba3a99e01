package gogemm

// dgemmGo is the float64 GEMM: a simple blocked loop meant for gradient
// checks and parity tests, not for speed.
func dgemmGo(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Check("Dgemm", tA, tB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	ScaleD(m, n, beta, c, ldc)
	if k == 0 || alpha == 0 {
		return
	}
	const kb, nb = 128, 512
	// Row-major op(B) block, copied when B is transposed.
	var bt []float64
	if tB {
		bt = make([]float64, kb*nb)
	}
	for jc := 0; jc < n; jc += nb {
		ncur := min(nb, n-jc)
		for pc := 0; pc < k; pc += kb {
			kcur := min(kb, k-pc)
			var bb []float64
			bld := ldb
			if !tB {
				bb = b[pc*ldb+jc:]
			} else {
				for p := 0; p < kcur; p++ {
					row := bt[p*ncur : p*ncur+ncur]
					for j := range row {
						row[j] = b[(jc+j)*ldb+pc+p]
					}
				}
				bb, bld = bt, ncur
			}
			for i := 0; i < m; i++ {
				ci := c[i*ldc+jc : i*ldc+jc+ncur]
				for p := 0; p < kcur; p++ {
					var x float64
					if tA {
						x = a[(pc+p)*lda+i]
					} else {
						x = a[i*lda+pc+p]
					}
					x *= alpha
					bp := bb[p*bld : p*bld+ncur]
					j := 0
					for ; j+4 <= len(ci); j += 4 {
						cc := ci[j : j+4 : j+4]
						bq := bp[j : j+4 : j+4]
						cc[0] += x * bq[0]
						cc[1] += x * bq[1]
						cc[2] += x * bq[2]
						cc[3] += x * bq[3]
					}
					for ; j < len(ci); j++ {
						ci[j] += x * bp[j]
					}
				}
			}
		}
	}
}

// ScaleD sets C = beta*C (C = 0 without reading it when beta == 0).
func ScaleD(m, n int, beta float64, c []float64, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}
