// dmref/conformance/schemes/ldm.hpp: the Linear Depth Memory binding
// (writes rls, outer_product, delta; kernel level with q, k, omega given, or
// model level with the query and key MLPs). Schema, corpus rows and registry
// entry: src/conformance/schemes/ldm.cpp.
#pragma once

#include "dmref/conformance/binding.hpp"
#include "dmref/ldm_backward.hpp"

namespace dmref::conf {

template <class S>
LdmConfig<S> ldm_config(const Problem& p, const Dims& D) {
  const Schema& s = D.sch();
  LdmConfig<S> c;
  c.d = int(D.d);
  c.groups = int(s.integer("groups"));
  c.dk = int(s.integer("dk"));
  ldm_validate_shape(c.d, c.groups, c.dk);  // before the tensors these shape are read
  const std::string w = s.text("write");
  c.write = w == "rls" ? MemoryWrite::rls : w == "delta" ? MemoryWrite::delta : MemoryWrite::outer_product;
  if (c.write == MemoryWrite::rls) {
    const std::string pu = s.text("p_update");
    c.p_update = pu == "joseph" ? PUpdate::joseph : pu == "naive" ? PUpdate::naive : PUpdate::symmetric;
  }
  c.read_residual = s.flag("read_residual");
  c.write_residual = s.flag("write_residual");
  if (D.model)  // kernel level: q, k, omega are inputs, so there is no key source to choose
    c.keys = s.text("keys_from") == "x_prev" ? KeySource::layer_input : KeySource::layer_output;
  // alpha > 0 and lambda in (0, 1]: the scheme's own rules (LinearDepthMemory::validate).
  if (c.write == MemoryWrite::rls) {
    c.alpha = S(s.number("alpha"));
    c.lambda = mat_at<S>(s.read(p, "param.lambda"), 0, D.L, c.groups);
  }
  if (c.write == MemoryWrite::delta) c.beta = mat_at<S>(s.read(p, "param.beta"), 0, D.L, c.groups);
  return c;
}

template <class S>
SmallMlp<S> small_mlp(const Problem& p, const Dims& D, const std::string& name, std::int64_t in, std::int64_t out) {
  SmallMlp<S> m;
  const Schema& s = D.sch();
  if (s.integer(name + "_hidden") == 0) {
    m.W2 = mat_at<S>(s.read(p, "param." + name + ".W"), 0, out, in);
  } else {
    const auto& W1 = s.read(p, "param." + name + ".W1");
    const std::int64_t hidden = W1.shape.at(0);
    m.W1 = mat_at<S>(W1, 0, hidden, in);
    m.W2 = mat_at<S>(s.read(p, "param." + name + ".W2"), 0, out, hidden);
  }
  return m;
}

/// The reference scheme for a config and an addresser.
struct MakeLdm {
  template <class S, class A>
  LinearDepthMemory<S, A> operator()(const LdmConfig<S>& c, A a) const {
    return LinearDepthMemory<S, A>(c, std::move(a));
  }
};

/// grad.param.lambda / grad.config.alpha (rls), grad.param.beta (delta).
template <class S, class G>
std::vector<ParamGrad<S>> ldm_param_grads(const LdmConfig<S>& cfg, const G& g) {
  std::vector<ParamGrad<S>> r;
  if (cfg.write == MemoryWrite::rls) {
    r.push_back(ParamGrad<S>{"param.lambda", {}}.add(g.lambda));
    r.push_back(ParamGrad<S>{"config.alpha", {}, {1}}.add(g.alpha));
  }
  if (cfg.write == MemoryWrite::delta) r.push_back(ParamGrad<S>{"param.beta", {}}.add(g.beta));
  return r;
}

/// The importance weights input.omega: each >= 0 (the scheme's GivenAddresses
/// rule, reported as the tensor's element; ldm and ldm_ops).
inline void ldm_check_omega(const Problem& p, const io::Tensor& W) {
  for (std::size_t i = 0; i < W.values.size(); ++i)
    if (!(W.values[i] >= 0)) p.fail("input.omega", "element " + std::to_string(i) + " = " + show(W.values[i]) + " is negative");
}

/// The given q, k, omega of token t (kernel level).
template <class S>
GivenAddresses<S> ldm_addresses(const Problem& p, const Dims& D, const LdmConfig<S>& cfg, std::int64_t t) {
  const std::int64_t G = cfg.groups, n = G * cfg.dk;
  const auto& Q = D.sch().read(p, "input.q");
  const auto& K = D.sch().read(p, "input.k");
  const auto& W = D.sch().read(p, "input.omega");
  ldm_check_omega(p, W);
  std::vector<Address<S>> a;
  for (std::int64_t l = 0; l < D.L; ++l)
    a.push_back({vec_at<S>(Q, (t * D.L + l) * n, n), vec_at<S>(K, (t * D.L + l) * n, n), vec_at<S>(W, (t * D.L + l) * G, G)});
  return GivenAddresses<S>{std::move(a)};
}

/// The kernel-level LDM gradients: the parameters' and grad.input.q/k/omega.
template <class S, class G>
std::vector<ParamGrad<S>> ldm_kernel_grads(const LdmConfig<S>& cfg, const G& g) {
  std::vector<ParamGrad<S>> r = ldm_param_grads<S>(cfg, g);
  ParamGrad<S> q{"input.q", {}}, k{"input.k", {}}, w{"input.omega", {}};
  for (const auto& a : g.address) {
    q.add(a.q.transpose());
    k.add(a.k.transpose());
    w.add(a.omega.transpose());
  }
  r.insert(r.end(), {q, k, w});
  return r;
}

/// input.grad.M (and .P) of token t as the adjoint of the final streams.
template <class S>
auto ldm_state_upstream(const Problem& p, const Dims& D, const LdmConfig<S>& cfg) {
  return [&p, D, G = std::int64_t(cfg.groups), dk = std::int64_t(cfg.dk), dv = std::int64_t(cfg.dv()),
          rls = cfg.write == MemoryWrite::rls](std::int64_t t, const auto&, auto& up) {
    const auto& GM = D.sch().read(p, "input.grad.M");
    up.last.emplace();
    auto& a = *up.last;
    a.x = Vec<S>::Zero(D.d);
    a.q = Vec<S>::Zero(G * dk);
    for (std::int64_t g = 0; g < G; ++g) {
      a.M.push_back(mat_at<S>(GM, (t * G + g) * dv * dk, dv, dk));
      a.P.push_back(rls ? mat_at<S>(D.sch().read(p, "input.grad.P"), (t * G + g) * dk * dk, dk, dk) : Mat<S>());
    }
  };
}

/// Runs the scheme `make(cfg, addresser)` builds (MakeLdm: the reference).
template <class S, class Make>
void run_ldm(const Problem& p, const Dims& D, Outputs<S>& o, const LdmConfig<S>& cfg, const Make& make) {
  const std::int64_t G = cfg.groups, dk = cfg.dk, n = G * dk;
  auto& M = o.add("output.M", D.sch().shape("output.M"));
  auto* P = cfg.write == MemoryWrite::rls ? &o.add("output.P", D.sch().shape("output.P")) : nullptr;
  const auto state_up = ldm_state_upstream<S>(p, D, cfg);
  auto record = [&](const auto& st) {
    for (const auto& g : st.mem) {
      Outputs<S>::append(M, g.M);
      if (P) Outputs<S>::append(*P, g.P);
    }
  };
  if (p.layout_only && p.grad && cfg.write == MemoryWrite::rls) o.add("grad.config.alpha", {1});
  if (D.model) {
    MlpAddresses<S> addr{small_mlp<S>(p, D, "mlp_q", D.d, n), small_mlp<S>(p, D, "mlp_k", D.d, n + G), int(G), int(dk)};
    const auto scheme = make(cfg, std::move(addr));
    auto mlp = [&](std::vector<ParamGrad<S>>& r, const std::string& name, const SmallMlp<S>& g) {
      if (g.W1.size() == 0) {
        r.push_back(ParamGrad<S>{"param." + name + ".W", {}}.add(g.W2));
      } else {
        r.push_back(ParamGrad<S>{"param." + name + ".W1", {}}.add(g.W1));
        r.push_back(ParamGrad<S>{"param." + name + ".W2", {}}.add(g.W2));
      }
    };
    run_tokens<S>(p, D, o, [&](std::int64_t) -> const auto& { return scheme; },
                  [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); }, false,
                  [&](const auto& g) {
                    std::vector<ParamGrad<S>> r = ldm_param_grads<S>(cfg, g);
                    mlp(r, "mlp_q", g.mlp_q);
                    mlp(r, "mlp_k", g.mlp_k);
                    return r;
                  },
                  state_up);
  } else {
    run_tokens<S>(
        p, D, o, [&](std::int64_t t) { return make(cfg, ldm_addresses<S>(p, D, cfg, t)); },
        [&](std::int64_t, const auto&, const auto& tr) { record(tr.last); }, false,
        [&](const auto& g) { return ldm_kernel_grads<S>(cfg, g); }, state_up);
  }
}

template <class S>
void evaluate_ldm(const Problem& p, const Schema& s, Outputs<S>& o) {
  const Dims D = dims(s);
  run_ldm<S>(p, D, o, ldm_config<S>(p, D), MakeLdm{});
}

}  // namespace dmref::conf
