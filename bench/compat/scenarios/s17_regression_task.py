"""A regression TaskSpec with MSE: what the records hold."""
import torch

from _observe import describe, fixed_weights, nnx, weights


def observe(o):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 4, generator=g)
    y = torch.randn(8, 2, generator=g)
    loader = [(x[:4], y[:4]), (x[4:], y[4:])]
    mp = o.call("model_params", lambda: nnx.NNModelParams(net=nnx.Nets.FEED_FWD, loss=nnx.Losses.MEAN_SQUARED_ERROR,
                                                           task=nnx.TaskSpec.regression(2)), lambda v: v.state())
    if mp is None:
        return
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU), mp)
    fixed_weights(model.net)
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0)
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader, val_loader=loader))
    last = run.idps[-1]
    for split, edp in (("train", last.train_edp), ("val", last.val_edp)):
        o[f"{split}.kind"] = getattr(edp, "kind", "<no attribute>")
        o[f"{split}.error"] = edp.error
        o[f"{split}.accuracy"] = edp.accuracy
        o[f"{split}.loss"] = edp.loss
        o[f"{split}.count"] = getattr(edp, "count", "<no attribute>")
        o[f"{split}.metrics"] = {k: float(v) for k, v in (getattr(edp, "metrics", None) or {}).items()}
    o["weights"] = weights(model.net)
    pr = model.predict_proba(x)
    o["predict_proba.probabilities"] = describe(pr.probabilities)
    o["predict_proba.decoded"] = describe(pr.decoded)
    o.call("width_mismatch", lambda: nnx.NNModel(
        nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU), mp), describe)
