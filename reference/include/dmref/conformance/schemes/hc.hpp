// dmref/conformance/schemes/hc.hpp: the Hyper-Connections binding (static,
// dynamic with LayerNorm or RMSNorm, tanh on or off). Schema, corpus rows and
// registry entry: src/conformance/schemes/hc.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/conformance/schemes/hc_constants.hpp"
#include "dmref/hc_backward.hpp"

namespace dmref::conf {

template <class S>
HcConfig<S> hc_config(const Problem& p, const Dims& D) {
  const Schema& s = D.sch();
  const auto n = s.integer("n"), d = D.d;
  HcConfig<S> c = hc_constants<S>(s, n, d);
  const auto& am = s.read(p, "param.am");
  const auto& ar = s.read(p, "param.ar");
  const auto& b = s.read(p, "param.b");
  const io::Tensor *g = nullptr, *bias = nullptr, *wm = nullptr, *wr = nullptr, *wb = nullptr, *sc = nullptr;
  if (c.dynamic) {
    g = &s.read(p, "param.ln_gain");
    if (c.norm == HcNorm::layer) bias = &s.read(p, "param.ln_bias");
    wm = &s.read(p, "param.wm");
    wr = &s.read(p, "param.wr");
    wb = &s.read(p, "param.wb");
    sc = &s.read(p, "param.scale");
  }
  for (std::int64_t l = 0; l < D.L; ++l) {
    HcLayer<S> q;
    q.am = vec_at<S>(am, l * n, n);
    q.ar = mat_at<S>(ar, l * n * n, n, n);
    q.b = vec_at<S>(b, l * n, n);
    if (c.dynamic) {
      q.ln_gain = vec_at<S>(*g, l * d, d);
      if (bias) q.ln_bias = vec_at<S>(*bias, l * d, d);
      q.wm = vec_at<S>(*wm, l * d, d);
      q.wr = mat_at<S>(*wr, l * d * n, d, n);
      q.wb = vec_at<S>(*wb, l * d, d);
      q.s_a = S(sc->values[2 * l]);
      q.s_b = S(sc->values[2 * l + 1]);
    }
    c.layers.push_back(std::move(q));
  }
  return c;
}

/// Runs any scheme with HyperConnections' State; output.H as well.
template <class S, class M>
void run_hc(const Problem& p, const Dims& D, Outputs<S>& o, const M& scheme) {
  const auto& c = scheme.config();
  const std::int64_t n = c.n, d = D.d;
  const bool dynamic = c.dynamic, bias = c.norm == HcNorm::layer;  // RMSNorm has no bias
  auto& H = o.add("output.H", D.sch().shape("output.H"));
  run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                [&](std::int64_t, const auto&, const auto& tr) { Outputs<S>::append(H, tr.last.H); }, false,
                [dynamic, bias](const auto& g) {
                  std::vector<ParamGrad<S>> r{{"param.am", {}}, {"param.ar", {}}, {"param.b", {}}};
                  ParamGrad<S> gain{"param.ln_gain", {}}, lnb{"param.ln_bias", {}}, wm{"param.wm", {}}, wr{"param.wr", {}},
                      wb{"param.wb", {}}, scale{"param.scale", {}};
                  for (const auto& q : g) {
                    r[0].add(q.am.transpose());
                    r[1].add(q.ar);
                    r[2].add(q.b.transpose());
                    if (!dynamic) continue;
                    gain.add(q.ln_gain.transpose());
                    lnb.add(q.ln_bias.transpose());
                    wm.add(q.wm.transpose());
                    wr.add(q.wr);
                    wb.add(q.wb.transpose());
                    scale.add(q.s_a).add(q.s_b);
                  }
                  if (dynamic) {
                    r.push_back(gain);
                    if (bias) r.push_back(lnb);
                    r.insert(r.end(), {wm, wr, wb, scale});
                  }
                  return r;
                },
                [&](std::int64_t t, const auto&, auto& up) {
                  up.last.emplace();
                  up.last->H = mat_at<S>(D.sch().read(p, "input.grad.H"), t * n * d, n, d);
                });
}

template <class S>
void evaluate_hc(const Problem& p, const Schema& s, Outputs<S>& o) {
  const Dims D = dims(s);
  run_hc<S>(p, D, o, HyperConnections<S>(hc_config<S>(p, D)));
}

}  // namespace dmref::conf
