//! Least-squares fits of the calibration models, with 95% confidence intervals.
//!
//! Weighted linear least squares, weights 1/y², so that every point counts by its relative error:
//! times span five orders of magnitude (8 KiB to 1 GiB messages) and plain least squares would
//! fit only the largest. Standard errors from the weighted normal equations,
//! cov = s²·(XᵀWX)⁻¹ with s² = Σ wᵢrᵢ² / (n − p); intervals β̂ ± t(0.975, n − p)·se
//! (e.g. Montgomery, Peck & Vining, *Introduction to Linear Regression Analysis*, §3.3 and §5.5).
//! The t quantile comes from `statrs`.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::cluster::calibration::Estimated;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("{points} measurements cannot fit {params} parameters; measure at least {need} sizes")]
    TooFewPoints {
        points: usize,
        params: usize,
        need: usize,
    },
    #[error(
        "the measurements do not determine the fit (the design matrix is singular); measure more distinct sizes"
    )]
    Singular,
    #[error("measured time {value} s is not a positive number; the timer returned garbage")]
    BadTime { value: f64 },
}

/// A fitted linear model y ≈ Σ cⱼ·xⱼ.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearFit {
    pub coefficients: Vec<Estimated>,
    pub standard_errors: Vec<f64>,
    /// (y − ŷ) / ŷ per point.
    pub relative_residuals: Vec<f64>,
    /// Weighted R² (1 − SSres/SStot, both weighted).
    pub r_squared: f64,
}

/// Weighted (1/y²) least squares of `y` on the columns in `rows` (one row of regressors per point).
pub fn relative_least_squares(rows: &[Vec<f64>], y: &[f64]) -> Result<LinearFit, FitError> {
    let n = y.len();
    let p = rows.first().map_or(0, Vec::len);
    if n <= p || p == 0 {
        return Err(FitError::TooFewPoints {
            points: n,
            params: p,
            need: p + 1,
        });
    }
    if let Some(&value) = y.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
        return Err(FitError::BadTime { value });
    }
    // Scale every column to a maximum of 1 so the normal equations stay well conditioned
    // (flops ~1e12 next to a constant 1).
    let scale: Vec<f64> = (0..p)
        .map(|j| {
            let max = rows.iter().map(|r| r[j].abs()).fold(0.0, f64::max);
            if max > 0.0 { max } else { 1.0 }
        })
        .collect();
    let mut xtwx = vec![vec![0.0; p]; p];
    let mut xtwy = vec![0.0; p];
    for (row, &yi) in rows.iter().zip(y) {
        let w = 1.0 / (yi * yi);
        for a in 0..p {
            let xa = row[a] / scale[a];
            xtwy[a] += w * xa * yi;
            for b in 0..p {
                xtwx[a][b] += w * xa * row[b] / scale[b];
            }
        }
    }
    let inverse = invert(&xtwx).ok_or(FitError::Singular)?;
    let beta: Vec<f64> = (0..p)
        .map(|a| (0..p).map(|b| inverse[a][b] * xtwy[b]).sum())
        .collect();
    let fitted: Vec<f64> = rows
        .iter()
        .map(|row| (0..p).map(|j| row[j] / scale[j] * beta[j]).sum())
        .collect();
    let weighted_ss: f64 = y
        .iter()
        .zip(&fitted)
        .map(|(yi, fi)| ((yi - fi) / yi).powi(2))
        .sum();
    let wsum: f64 = y.iter().map(|yi| 1.0 / (yi * yi)).sum();
    let wmean = y.iter().map(|yi| yi / (yi * yi)).sum::<f64>() / wsum;
    let weighted_tot: f64 = y.iter().map(|yi| ((yi - wmean) / yi).powi(2)).sum();
    let dof = (n - p) as f64;
    let s2 = weighted_ss / dof;
    let quantile = StudentsT::new(0.0, 1.0, dof)
        .map(|t| t.inverse_cdf(0.975))
        .unwrap_or(1.96);
    let mut coefficients = Vec::with_capacity(p);
    let mut standard_errors = Vec::with_capacity(p);
    for j in 0..p {
        let value = beta[j] / scale[j];
        let se = (s2 * inverse[j][j]).max(0.0).sqrt() / scale[j];
        standard_errors.push(se);
        coefficients.push(Estimated {
            value,
            ci95_low: value - quantile * se,
            ci95_high: value + quantile * se,
        });
    }
    let relative_residuals = y
        .iter()
        .zip(&fitted)
        .map(|(yi, fi)| if *fi != 0.0 { (yi - fi) / fi } else { f64::NAN })
        .collect();
    // With an intercept (every fit here has one) the residuals are at most the spread about the
    // weighted mean, so R² is 0 to 1; the clamp takes off the rounding of the sums.
    let r_squared = if weighted_tot > 0.0 {
        (1.0 - weighted_ss / weighted_tot).clamp(0.0, 1.0)
    } else {
        1.0
    };
    Ok(LinearFit {
        coefficients,
        standard_errors,
        relative_residuals,
        r_squared,
    })
}

/// Gauss-Jordan inverse with partial pivoting; `None` when singular.
fn invert(matrix: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = matrix.len();
    let mut a: Vec<Vec<f64>> = matrix.to_vec();
    let mut inv: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let d = a[col][col];
        for j in 0..n {
            a[col][j] /= d;
            inv[col][j] /= d;
        }
        for row in 0..n {
            if row != col {
                let f = a[row][col];
                for j in 0..n {
                    a[row][j] -= f * a[col][j];
                    inv[row][j] -= f * inv[col][j];
                }
            }
        }
    }
    Some(inv)
}

/// α-β (Hockney 1994) fit of a collective: t = α + β·w, with w the wire bytes per rank
/// (nccl-tests' bus-bandwidth factor × tensor bytes). Returns (α s, β s/byte).
pub fn alpha_beta(wire_bytes: &[f64], times_s: &[f64]) -> Result<LinearFit, FitError> {
    let rows: Vec<Vec<f64>> = wire_bytes.iter().map(|w| vec![1.0, *w]).collect();
    relative_least_squares(&rows, times_s)
}

/// The GEMM model t = latency + flops·c_f + bytes·c_b (see `cluster::calibration::GemmFit`). Drops the bytes
/// term when it fits to zero or below, or when its 95% interval includes zero (the sweep cannot
/// tell its bandwidth from none: compute-bound sweeps; its reciprocal, the bandwidth, would have an
/// interval running to infinity), and returns whether it kept it.
pub fn gemm_curve(
    flops: &[f64],
    bytes: &[f64],
    times_s: &[f64],
) -> Result<(LinearFit, bool), FitError> {
    let rows: Vec<Vec<f64>> = flops
        .iter()
        .zip(bytes)
        .map(|(f, b)| vec![1.0, *f, *b])
        .collect();
    let full = relative_least_squares(&rows, times_s)?;
    if full.coefficients[2].ci95_low > 0.0 && full.coefficients[1].value > 0.0 {
        return Ok((full, true));
    }
    let rows: Vec<Vec<f64>> = flops.iter().map(|f| vec![1.0, *f]).collect();
    Ok((relative_least_squares(&rows, times_s)?, false))
}

/// Median of a non-empty sample (mean of the middle two for even lengths).
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic multiplicative noise in [−amp, amp].
    fn noise(i: usize, amp: f64) -> f64 {
        let x = ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + amp * (2.0 * x - 1.0)
    }

    #[test]
    fn alpha_beta_recovers_known_latency_and_bandwidth() {
        let (alpha, bw) = (8e-6, 150e9);
        let sizes: Vec<f64> = (13..=30).map(|e| f64::from(1u32 << e)).collect();
        let times: Vec<f64> = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (alpha + s / bw) * noise(i, 0.03))
            .collect();
        let fit = alpha_beta(&sizes, &times).unwrap();
        let a = fit.coefficients[0];
        let b = fit.coefficients[1];
        assert!((a.value / alpha - 1.0).abs() < 0.1, "alpha {}", a.value);
        assert!(
            (1.0 / b.value / bw - 1.0).abs() < 0.05,
            "bw {}",
            1.0 / b.value
        );
        assert!(a.ci95_low < alpha && alpha < a.ci95_high);
        assert!(b.ci95_low < 1.0 / bw && 1.0 / bw < b.ci95_high);
        assert_eq!(fit.relative_residuals.len(), sizes.len());
        assert!(fit.relative_residuals.iter().all(|r| r.abs() < 0.05));
    }

    #[test]
    fn gemm_curve_recovers_latency_throughput_and_bandwidth() {
        let (latency, flops_per_s, bytes_per_s) = (5e-6, 700e12, 3e12);
        let mut flops = Vec::new();
        let mut bytes = Vec::new();
        for &m in &[64.0, 256.0, 1024.0, 4096.0, 16384.0] {
            for &n in &[64.0, 512.0, 4096.0, 16384.0] {
                let k: f64 = 4096.0;
                flops.push(2.0 * m * n * k);
                bytes.push(2.0 * (m * k + k * n + m * n));
            }
        }
        let times: Vec<f64> = flops
            .iter()
            .zip(&bytes)
            .enumerate()
            .map(|(i, (f, b))| (latency + f / flops_per_s + b / bytes_per_s) * noise(i + 7, 0.02))
            .collect();
        let (fit, kept_bytes) = gemm_curve(&flops, &bytes, &times).unwrap();
        assert!(kept_bytes);
        let c = &fit.coefficients;
        assert!(
            (c[0].value / latency - 1.0).abs() < 0.15,
            "latency {}",
            c[0].value
        );
        assert!((1.0 / c[1].value / flops_per_s - 1.0).abs() < 0.05);
        assert!((1.0 / c[2].value / bytes_per_s - 1.0).abs() < 0.15);
        assert!(c[1].ci95_low < 1.0 / flops_per_s && 1.0 / flops_per_s < c[1].ci95_high);
        assert!(fit.r_squared > 0.99);
    }

    #[test]
    fn too_few_points_and_bad_times_are_errors() {
        assert!(matches!(
            alpha_beta(&[1.0, 2.0], &[1.0, 2.0]),
            Err(FitError::TooFewPoints { .. })
        ));
        assert!(matches!(
            alpha_beta(&[1.0, 2.0, 3.0], &[1.0, -2.0, 3.0]),
            Err(FitError::BadTime { .. })
        ));
    }

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
