-- 016_result_precision.sql - the precision of a run's linear-layer products
-- (engine/result_fields.h): "fp32", or "bf16" (bf16 operands into fp32
-- accumulators, train.precision bf16 or auto where the CPU has AVX512_BF16).
-- A bf16 run's peak_gflops is the bf16 products' peak and its peak_isa names
-- their kernel (amx-bf16 or avx512-bf16). NULL for results stored before.
ALTER TABLE results ADD COLUMN precision TEXT;
