"""spark_pipeline."""
