"""NNx's own example scripts, the in-scope ones, run unchanged against ``nnx_api``.

The examples live in the ``examples/`` folder of NNx's GitHub repository (thekaveh/NNx); they are
not in the sdist ``run.py`` downloads. They are saved verbatim, by hand, into
``build/nnx-examples/`` (ignored; nothing of NNx's is committed). Each file was read at its own
commit, the one the stored copy of the repository held for it (``COMMITS`` below).

1. ``EXAMPLES`` lists every ``.py`` file of that folder with IN or OUT and why (OUT: the feature is
   out of scope here, ``nnx_api/scope.py``; an example that uses such a feature in passing is out);
2. each IN example found in the folder runs in its own subprocess, ``python <file>`` in a fresh
   temporary directory, with this folder on ``PYTHONPATH`` so that ``sitecustomize.py`` installs
   the ``nnx`` → ``nnx_api`` alias (``alias.py``): no file is edited, not even its imports;
3. ``ddp_supervised.py`` runs as its docstring says: ``torchrun --standalone --nproc_per_node=2
   … --device cpu --epochs 2 --output ddp-out`` (two CPU ranks over Gloo), via
   ``python -m torch.distributed.run``;
4. one line per example (passed / failed with the last line of its error / missing from the
   folder), then ``nnx-examples: N in scope, P passed, K failed with a kept reason, F failed, M
   missing``; exit 1 if any failed without a reason in ``KEPT``.

Usage: ``python bench/nnx_suite/run_examples.py [--dir build/nnx-examples] [--timeout 300] [names …]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IN, OUT = "IN", "OUT"

EXAMPLES = {
    "01_synthetic_classification.py": (IN, "lifecycle, EarlyStopping / LRMonitor, BEST checkpoint, predict_proba"),
    "02_resume_training.py": (IN, "warm resume from LAST"),
    "03_custom_metrics.py": (IN, "extra_metrics"),
    "04_onnx_export.py": (IN, "export: to_onnx"),
    "05_custom_train_step_autoencoder.py": (IN, "custom train_step_fn"),
    "06_finetune_with_layer_freezing.py": (IN, "finetuning helpers: load_pretrained, freeze"),
    "07_lora_finetuning.py": (OUT, "LoRA / PEFT"),
    "08_diffusion_2d_mixture.py": (OUT, "diffusion"),
    "09_gan_with_trainer.py": (IN, "GAN with Trainer: named optimizers, param groups, resume, scheduler clocks"),
    "10_knowledge_distillation.py": (IN, "knowledge distillation: kd_train_step_factory, kd_objective"),
    "11_tinystories_lm.py": (OUT, "language models / tokenizers (TinyStories)"),
    "12_quantize_int8.py": (OUT, "quantisation"),
    "13_train_domain_embedder.py": (OUT, "embeddings"),
    "14_moe_classifier.py": (OUT, "mixture of experts"),
    "15_qat_classifier.py": (OUT, "quantisation-aware training"),
    "16_ijepa_cifar10.py": (OUT, "JEPA"),
    "16_ijepa_image_plumbing.py": (OUT, "JEPA"),
    "17_export_transformer_to_gguf.py": (OUT, "transformers, GGUF export"),
    "18_export_ollama_bundle.py": (OUT, "transformers, Ollama export"),
    "18_publish_to_ollama.py": (OUT, "transformers, Ollama"),
    "19_prune_mnist.py": (OUT, "pruning"),
    "19_prune_synthetic_classifier.py": (OUT, "pruning"),
    "20_low_rank_surgery_ffn.py": (OUT, "surgery"),
    "20_surgery_resnet.py": (OUT, "surgery"),
    "21_viz_attribute_xai.py": (OUT, "viz / XAI"),
    "22_dpo_synthetic_preferences.py": (OUT, "DPO"),
    "22_dpo_tinystories.py": (OUT, "DPO, language models"),
    "23_born_again_distillation.py": (OUT, "born-again distillation"),
    "24_feature_kd.py": (OUT, "feature KD"),
    "25_conv_classifier.py": (IN, "conv classifier (NNConvParams, Nets.CONV)"),
    "26_custom_eval_step.py": (IN, "custom eval_step_fn"),
    "abstention_offline.py": (OUT, "abstention"),
    "benchmark_compile.py": (OUT, "compile benchmarks (nnx.benchmarking)"),
    "builder_branching.py": (OUT, "uses NNTransformerParams(Builder) in passing: transformers"),
    "calibration_offline.py": (OUT, "calibration"),
    "compare_seeds.py": (OUT, "multi-seed comparison (nnx.comparison, data splits, provenance)"),
    "custom_module.py": (IN, "custom module, registered model factories"),
    "ddp_supervised.py": (IN, "DDP (torchrun, 2 CPU ranks over Gloo)"),
    "decision_benchmark_offline.py": (OUT, "decision benchmarks (nnx.decisions.benchmark)"),
    "decision_fixed_head.py": (IN, "typed decisions: FixedHeadProvider"),
    "decision_jev.py": (OUT, "Jev decisions"),
    "decision_jobs.py": (IN, "typed decisions: DecisionJob"),
    "decision_model_pilot.py": (OUT, "decision model pilot (and nnx.decisions.benchmark)"),
    "decision_nli.py": (OUT, "NLI decisions"),
    "experiment_plan.py": (IN, "plans: ExperimentPlan"),
    "graph_classification_offline.py": (OUT, "graph nets"),
    "graph_optional_splits.py": (OUT, "graph nets (NNGraphDataset, Nets.GRAPH_CONV)"),
    "history_journal.py": (IN, "history journal"),
    "link_prediction_offline.py": (OUT, "graph nets (link prediction)"),
    "offline_teacher_distillation.py": (OUT, "offline distillation (nnx.paradigms.offline_distillation)"),
    "optimizer_factories.py": (IN, "params: registered optimizer factories, AdamW, Trainer"),
    "ordered_logits_pipeline.py": (OUT, "generation / transformers / tokenizers"),
    "prediction_stream.py": (IN, "prediction: iter_predict, StreamingMetrics, streaming_eval_step"),
    "preprocessing_offline.py": (OUT, "preprocessing, data splits (torchvision)"),
    "ranking_offline.py": (OUT, "ranking task family (nnx.ranking)"),
    "regression_task.py": (IN, "tasks and metrics: regression / multilabel adapters"),
    "result_boundaries.py": (OUT, "uses bundles in passing (export_bundle, inspect_bundle_result)"),
    "run_bundle.py": (OUT, "bundles, calibration"),
    "scheduler_clocks.py": (IN, "schedulers: epoch / optimizer_update clocks, objectives, exact resume"),
    "search_offline.py": (IN, "search (Optuna) over plans"),
    "split_replay.py": (OUT, "data splits, provenance"),
    "tabular_validation.py": (IN, "NNTabularDataset admission (a supported dataset, docs/nnx-compat.md)"),
}

KEPT = {  # in-scope examples that fail here, and why that is kept
    "decision_fixed_head.py": "its step 4b builds FixedHeadProvider on a one-logit head without question=; the stored "
                              "copy predates NNx 0.4.1, whose own suite requires that call to raise "
                              "(test_decision_nnx_adapter.py), as it does here",
    "history_journal.py": "it calls NNRun._epoch_series(), a private method of NNx's; with that one call stood in, "
                          "the rest (journal, lazy resume, CSV export with lineage) passes",
}

COMMITS = {  # the commit each saved file was read at (thekaveh/NNx)
    "01_synthetic_classification.py": "192c857a66b2f7fa393d952cc5986f85f0bc3266",
    "02_resume_training.py": "14a4d2c03c122ca45f278ee47688efdc87d2d02e",
    "03_custom_metrics.py": "378acfb340b2938f15f1003fd0f2006fd7931a75",
    "04_onnx_export.py": "024fc2a8b6754ccf0d3d2d3b66e84240ebd987d1",
    "05_custom_train_step_autoencoder.py": "0615d89d61aae25a0e85fff546268d374ac9b405",
    "06_finetune_with_layer_freezing.py": "1bc95bc28e2815e5448dd57d323475d910f48677",
    "09_gan_with_trainer.py": "06f61aba23af998f08945c04c2ec41643e8dd9e5",
    "10_knowledge_distillation.py": "5988a09ca963f3f90f7b1b487500fedf8bd1f0cf",
    "25_conv_classifier.py": "adbb0dfee986e9428c69134ea66067b7753aa2b0",
    "26_custom_eval_step.py": "16fa58b92615b7d4a9e1ce2687c5e9044501b43c",
    "custom_module.py": "ef52519e28bc4dac383e4ec65bcc4b25172ec5e8",
    "ddp_supervised.py": "00e63e05bfe75b28a96c4df212e5de6536ef76e6",
    "decision_fixed_head.py": "0a0fbc4734ff63056b585742c0bb8cc09a2b4b3d",
    "decision_jobs.py": "cc6ca8c036a3c51e6f52a7620a1dfd767aa5bacc",
    "experiment_plan.py": "67fe48ac9f299245bb9f44cdc5b32b95bc78c671",
    "history_journal.py": "dd00bbe3c88064b4afef469ddfd6e618ed0af0a5",
    "optimizer_factories.py": "afe6e912dee95e8042711e56c9033f48440590a5",
    "prediction_stream.py": "58006f9c3ba21c2c5cd165919012d099d241fe38",
    "regression_task.py": "5d65d792277cd1d62b5130f6ff0f42c51b87c849",
    "scheduler_clocks.py": "156d18f7c1894f9c84755f52f898f0e2681efa68",
    "search_offline.py": "4d267a2f1ab631f166e4c079670f3c595e823cee",
    "tabular_validation.py": "711bc31f90735ae3f6356ed698d82f122f171cac",
}

LAUNCH = {  # examples that need another command line than ``python <file>``
    "ddp_supervised.py": lambda path: [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                       "--nproc_per_node=2", str(path), "--device", "cpu", "--epochs", "2",
                                       "--output", "ddp-out"],
}


def run_one(path: Path, timeout: float) -> tuple[bool, str]:
    """Run one example in a fresh temporary directory: (passed, last line of its error)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]), OMP_NUM_THREADS="1",
               NNX_TQDM_DISABLE="1")
    command = LAUNCH.get(path.name, lambda p: [sys.executable, str(p)])(path)
    with tempfile.TemporaryDirectory(prefix="nnx-example-") as cwd:
        try:
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout:.0f} s"
    if done.returncode == 0:
        return True, ""
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return False, lines[-1] if lines else f"exit status {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    """Run the in-scope examples found in ``--dir`` (or the named ones); exit 1 on an unexplained failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(REPO / "build" / "nnx-examples"), help="where the examples are saved")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per example")
    parser.add_argument("names", nargs="*", help="example file names (default: every IN example)")
    args = parser.parse_args(argv)
    folder = Path(args.dir).resolve()
    names = args.names or [name for name, (scope, _) in EXAMPLES.items() if scope == IN]
    passed = failed = kept = missing = 0
    for name in names:
        if EXAMPLES.get(name, (OUT,))[0] != IN:
            print(f"{name}: not an in-scope example ({EXAMPLES.get(name, (OUT, 'unknown'))[1]})")
            continue
        path = folder / name
        if not path.is_file():
            missing += 1
            print(f"{name}: missing from {folder}")
            continue
        ok, error = run_one(path, args.timeout)
        if ok:
            passed += 1
            print(f"{name}: passed", flush=True)
        elif name in KEPT:
            kept += 1
            print(f"{name}: failed, kept: {KEPT[name]} ({error})", flush=True)
        else:
            failed += 1
            print(f"{name}: FAILED: {error}", flush=True)
    total = passed + failed + kept + missing
    print(f"nnx-examples: {total} in scope, {passed} passed, {kept} failed with a kept reason, {failed} failed, "
          f"{missing} missing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
