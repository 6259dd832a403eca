"""evaluate() and NNEvaluationDataPoint: fields, values, state()."""
from _observe import describe, field_names, nnx, toy_data, toy_model


def observe(o):
    model = toy_model()
    _, _, loader = toy_data(n=10)  # uneven last batch (2 rows)
    edp = model.evaluate(loader)
    o["evaluate.type"] = type(edp).__name__
    for f in ("loss", "error", "accuracy", "f1", "recall", "precision"):
        o[f"evaluate.{f}"] = getattr(edp, f)
    o["evaluate.count"] = getattr(edp, "count", "<no attribute>")
    o["evaluate.kind"] = getattr(edp, "kind", "<no attribute>")
    o["evaluate.extra"] = dict(edp.extra)
    o["evaluate.with_extra_metric"] = dict(model.evaluate(loader, extra_metrics={"n": lambda t, p: float(len(t))}).extra)
    o.call("evaluate.empty", lambda: model.evaluate([]), describe)
    e = nnx.NNEvaluationDataPoint.of([0, 1, 1], [0, 1, 2])
    o["EDP.fields"] = field_names(e)
    o["EDP.of"] = {f: getattr(e, f) for f in ("accuracy", "f1", "recall", "precision", "loss", "error")}
    o["EDP.state"] = e.state()
    o.call("EDP.with_loss.state", lambda: e.with_loss(0.5).with_error(0.25).state())
    o.call("EDP.with_extra", lambda: dict(e.with_extra({"b": 1.0, "a": 2.0}).extra))
    o.call("EDP.extra_order", lambda: list(e.with_extra({"b": 1.0, "a": 2.0}).extra))
    o.call("EDP.mean_of", lambda: nnx.NNEvaluationDataPoint.mean_of([e, nnx.NNEvaluationDataPoint.of([0], [0])]).state())
    o.call("EDP.micro", lambda: nnx.NNEvaluationDataPoint.of([0, 1, 1], [0, 1, 2], average="micro").f1)
    o.call("EDP.frozen", lambda: setattr(e, "loss", 1.0), describe)
    o.call("IDP.fields", lambda: field_names(nnx.NNIterationDataPoint))
