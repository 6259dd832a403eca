"""NNCheckpoint.load(BEST) → NNModel.from_checkpoint → identical predictions."""
import numpy as np

from _observe import describe, field_names, nnx, toy_data, toy_model


def observe(o):
    model = toy_model()
    x, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, momentum=(0.9, 0.999), weight_decay=0.0)
    run = model.train(nnx.NNTrainParams(n_epochs=3, optim=optim, train_loader=loader, val_loader=loader))
    best = nnx.NNCheckpoint.load(run=run.id, type=nnx.Checkpoints.BEST)
    o["best.type"] = type(best).__name__
    o["best.fields"] = field_names(best)
    o["best.idp.epoch_idx"] = best.idp.epoch_idx
    o["best.transforms"] = describe(best.transforms)
    o["best.reconstructible"] = getattr(best, "reconstructible", "<no attribute>")
    o["best.net_params_equal"] = best.net_params == model.net_params
    last = nnx.NNCheckpoint.load(run=run.id, type=nnx.Checkpoints.LAST)
    o.call("from_checkpoint.device_str", lambda: nnx.NNModel.from_checkpoint(last, device="cpu"), describe)
    restored = nnx.NNModel.from_checkpoint(last)
    o["restored.type"] = type(restored).__name__
    o["restored.same_predictions"] = bool(np.allclose(np.asarray(restored.predict(X=x).logits),
                                                      np.asarray(model.predict(X=x).logits), atol=1e-6))
    o.call("load_string_type", lambda: describe(nnx.NNCheckpoint.load(run=run.id, type="last")), lambda v: v)
    o.call("load_missing_run", lambda: nnx.NNCheckpoint.load(run="0" * 32, type=nnx.Checkpoints.LAST), describe)
    o.call("export_state_dict", lambda: describe(model.export_state_dict("w.pt")))
