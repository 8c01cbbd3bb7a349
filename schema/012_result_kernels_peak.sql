-- 012_result_kernels_peak.sql - which kernels a run ran, and the sgemm peak
-- its MFU was divided by, described (engine/result_fields.h, engine/calibrate.h).
--
-- isa: the engine's kernel path (avx512, avx2 or generic; NIGHTSHIFT_ISA
-- forces one); blas_core: OpenBLAS's kernel set (SkylakeX, Haswell, ...).
-- peak_isa: the instruction set of the peak's sgemm ("given" for a peak from
-- the spec or a flag); peak_cpu, peak_measured_at: where and when it was
-- measured; peak_others_cpu: the share of the CPUs other processes used
-- meanwhile (a peak measured on a busy machine reads low).
ALTER TABLE results ADD COLUMN peak_isa TEXT;
ALTER TABLE results ADD COLUMN peak_cpu TEXT;
ALTER TABLE results ADD COLUMN peak_measured_at TEXT;
ALTER TABLE results ADD COLUMN peak_others_cpu REAL;
ALTER TABLE results ADD COLUMN isa TEXT;
ALTER TABLE results ADD COLUMN blas_core TEXT;
