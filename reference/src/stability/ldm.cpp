// Stability sweeps of RLS Linear Depth Memory (dmref/stability.hpp): five
// formulations of the memory write (naive, symmetric, Joseph: ldm.hpp's
// PUpdate; Potter square root and the information-form closed form:
// rls_forms.hpp) in every dtype, against the symmetric recursion at 257 bits,
// which is itself checked against the 667-bit closed form.
#include "dmref/ldm.hpp"
#include "dmref/lowp.hpp"
#include "dmref/rls_forms.hpp"
#include "dmref/stability.hpp"

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dmref::stability {
namespace {

using Hi = mp200;
using Ref = mp77;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class Keys { random, collinear, rankdef };
const char* keys_name(Keys k) {
  switch (k) {
    case Keys::random: return "random";
    case Keys::collinear: return "collinear";
    case Keys::rankdef: return "rank-deficient";
  }
  return "?";
}

enum class Form { naive, symmetric, joseph, potter, closed };
const char* form_name(Form f) {
  switch (f) {
    case Form::naive: return "naive";
    case Form::symmetric: return "symmetric";
    case Form::joseph: return "joseph";
    case Form::potter: return "potter";
    case Form::closed: return "closed-form";
  }
  return "?";
}

/// A kernel-level LDM problem, in doubles (all on the shared 16-bit grid, the
/// scalars float32).
struct Problem {
  int d = 0, G = 0, dk = 0, dv = 0, L = 0;
  double alpha = 1;
  Mat<double> lambda;  // L x G
  std::vector<Vec<double>> v;
  std::vector<Address<double>> a;
  Vec<double> e;
};

// Nearly collinear keys: a fixed direction per group plus this much noise (angle ~ 1e-2).
constexpr double kCollinearNoise = 1e-2;

/// Keys: random: normalized Gaussian; collinear: normalize(base + 0.01 noise);
/// rank-deficient: Gaussian on the first dk/2 coordinates only, exact zeros in
/// the others (never excited: P grows like alpha / prod(lambda) there).
/// omega = 10^U(-s, s), s = omega_decades.
Problem make_problem(const Sizes& z, Keys keys, double lambda, double omega_decades, std::uint64_t seed) {
  Normal N(seed);
  Problem p;
  p.G = z.ldm_groups, p.dk = z.ldm_dk, p.dv = z.ldm_dv, p.L = z.ldm_layers, p.d = p.G * p.dv;
  p.alpha = 1;
  p.lambda = Mat<double>::Constant(p.L, p.G, on_f32(lambda));
  auto gauss = [&](int n) {
    Vec<double> x(n);
    for (int i = 0; i < n; ++i) x(i) = N();
    return x;
  };
  auto grid = [](Vec<double> x) { return Vec<double>(x.unaryExpr([](double t) { return on_grid(t); })); };
  std::vector<Vec<double>> base;
  for (int g = 0; g < p.G; ++g) base.push_back(gauss(p.dk).normalized());
  p.e = grid(gauss(p.d));
  for (int l = 0; l < p.L; ++l) {
    Address<double> a;
    a.q = Vec<double>(p.G * p.dk);
    a.k = Vec<double>(p.G * p.dk);
    a.omega = Vec<double>(p.G);
    for (int g = 0; g < p.G; ++g) {
      a.q.segment(g * p.dk, p.dk) = grid(gauss(p.dk).normalized());
      Vec<double> k = gauss(p.dk);
      if (keys == Keys::collinear) k = base[g] + kCollinearNoise * k / std::sqrt(double(p.dk));
      if (keys == Keys::rankdef) k.tail(p.dk - p.dk / 2).setZero();
      a.k.segment(g * p.dk, p.dk) = grid(k.normalized());
      a.omega(g) = on_f32(std::pow(10.0, omega_decades * N.uniform()));
    }
    p.a.push_back(a);
    p.v.push_back(grid(gauss(p.d)));
  }
  return p;
}

template <class T>
Eigen::VectorXd to_d(const Vec<T>& x) {
  return x.unaryExpr([](const T& t) { return to_double(t); });
}
template <class T>
Eigen::MatrixXd to_d(const Mat<T>& x) {
  return x.unaryExpr([](const T& t) { return to_double(t); });
}
template <class T>
bool finite(const Mat<T>& m) {
  for (Eigen::Index i = 0; i < m.size(); ++i)
    if (!std::isfinite(to_double(m(i)))) return false;
  return true;
}
template <class T>
bool finite(const Vec<T>& m) {
  for (Eigen::Index i = 0; i < m.size(); ++i)
    if (!std::isfinite(to_double(m(i)))) return false;
  return true;
}

/// The addresses of layer l, converted to T on demand (the reference class's
/// addresser: the sequences a kernel consumes).
template <class T>
struct ProblemAddresses {
  const Problem* p;
  Address<T> operator()(int l, const Vec<T>&, const Vec<T>&) const {
    const auto& a = p->a.at(l);
    return {convert<T>(a.q), convert<T>(a.k), convert<T>(a.omega)};
  }
};

template <class T>
LdmConfig<T> config(const Problem& p, PUpdate how) {
  LdmConfig<T> c;
  c.d = p.d;
  c.groups = p.G;
  c.dk = p.dk;
  c.write = MemoryWrite::rls;
  c.alpha = T(p.alpha);
  c.lambda = convert<T>(p.lambda);
  c.p_update = how;
  return c;
}

/// The naive, symmetric and Joseph forms: ldm.hpp's LinearDepthMemory itself.
template <class T>
class ClassStepper : public Stepper {
 public:
  using Scheme = LinearDepthMemory<T, ProblemAddresses<T>>;
  ClassStepper(const Problem& p, PUpdate how, const FloatFormat* store)
      : p_(p), m_(config<T>(p, how), ProblemAddresses<T>{&p}), store_(store) {
    st_ = m_.init(convert<T>(p.e));
    keep();
  }
  void step(int l) override {
    m_.write(st_, l, convert<T>(p_.v[l]));
    keep();
  }
  void snap(Snap& s, bool full) override {
    s.mem = to_d<T>(m_.readout(st_));
    s.read = to_d<T>(m_.read(st_, 0));
    s.state.resize(p_.G * p_.dv * p_.dk);
    s.finite = finite<T>(st_.x);
    s.P.clear();
    for (int g = 0; g < p_.G; ++g) {
      const auto& G = st_.mem[g];
      s.state.segment(g * p_.dv * p_.dk, p_.dv * p_.dk) = Eigen::Map<const Eigen::VectorXd>(to_d<T>(G.M).data(), G.M.size());
      s.finite = s.finite && finite<T>(G.M) && finite<T>(G.P);
      if (full) s.P.push_back(to_d<T>(G.P));
    }
  }
  const Mat<T>& M(int g) const { return st_.mem[g].M; }

 private:
  void keep() {  // mixed precision: the streams as stored between layers
    if (!store_) return;
    store_in(*store_, st_.x);
    store_in(*store_, st_.q);
    for (auto& G : st_.mem) {
      store_in(*store_, G.M);
      store_in(*store_, G.P);
    }
  }
  const Problem& p_;
  Scheme m_;
  typename Scheme::State st_;
  const FloatFormat* store_;
};

/// The Potter and closed forms (rls_forms.hpp) with LDM's read: h = x + concat_g M_g q_g.
template <class T>
class FormStepper : public Stepper {
 public:
  FormStepper(const Problem& p, Form form, const FloatFormat* store) : p_(p), form_(form), store_(store) {
    x_ = convert<T>(p.e);
    q_ = Vec<T>::Zero(p.G * p.dk);
    const T alpha(p.alpha);
    for (int g = 0; g < p.G; ++g) {
      M_.push_back(Mat<T>::Zero(p.dv, p.dk));
      if (form == Form::potter) {
        F_.push_back(rls_potter_init<T>(p.dk, alpha));
      } else {
        F_.push_back(Mat<T>::Identity(p.dk, p.dk) / alpha);  // R_{-1} = I / alpha
        B_.push_back(Mat<T>::Zero(p.dv, p.dk));
      }
    }
    keep();
  }
  void step(int l) override {
    x_ += convert<T>(p_.v[l]);
    const auto& a = p_.a[l];
    const int dk = p_.dk, dv = p_.dv;
    for (int g = 0; g < p_.G; ++g) {
      const Vec<T> k = convert<T>(Vec<double>(a.k.segment(g * dk, dk)));
      const Vec<T> v = convert<T>(Vec<double>(p_.v[l].segment(g * dv, dv)));
      const T w(a.omega(g)), lambda(p_.lambda(l, g));
      if (form_ == Form::potter) {
        rls_potter_step<T>(M_[g], F_[g], k, v, w, lambda);
      } else {
        rls_information_step<T>(F_[g], B_[g], k, v, w, lambda);
        M_[g] = rls_closed_form_solve<T>(F_[g], B_[g]);
      }
    }
    q_ = convert<T>(a.q);
    keep();
  }
  void snap(Snap& s, bool full) override {
    const int dk = p_.dk, dv = p_.dv;
    Vec<T> r(p_.d);
    for (int g = 0; g < p_.G; ++g) r.segment(g * dv, dv) = M_[g] * Vec<T>(q_.segment(g * dk, dk));
    s.mem = to_d<T>(r);
    s.read = to_d<T>(Vec<T>(x_ + r));
    s.state.resize(p_.G * dv * dk);
    s.finite = finite<T>(x_);
    s.P.clear();
    for (int g = 0; g < p_.G; ++g) {
      s.state.segment(g * dv * dk, dv * dk) = Eigen::Map<const Eigen::VectorXd>(to_d<T>(M_[g]).data(), dv * dk);
      s.finite = s.finite && finite<T>(M_[g]) && finite<T>(F_[g]) && (B_.empty() || finite<T>(B_[g]));
      if (!full) continue;
      const Eigen::MatrixXd F = to_d<T>(F_[g]);
      s.P.push_back(form_ == Form::potter ? Eigen::MatrixXd(F * F.transpose()) : inverse_spd(F));
    }
  }

 private:
  /// R^{-1} for the closed form's implied P, by an eigendecomposition of the
  /// (scaled) symmetric part of R in double.
  static Eigen::MatrixXd inverse_spd(const Eigen::MatrixXd& R) {
    if (!R.allFinite()) return Eigen::MatrixXd::Constant(R.rows(), R.cols(), kNaN);
    const double s = R.cwiseAbs().maxCoeff();
    if (s == 0) return Eigen::MatrixXd::Constant(R.rows(), R.cols(), std::numeric_limits<double>::infinity());
    const Eigen::MatrixXd A = R / s;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(0.5 * (A + A.transpose()));
    const Eigen::VectorXd inv = es.eigenvalues().cwiseInverse() / s;
    return es.eigenvectors() * inv.asDiagonal() * es.eigenvectors().transpose();
  }
  void keep() {
    if (!store_) return;
    store_in(*store_, x_);
    store_in(*store_, q_);
    for (auto& m : M_) store_in(*store_, m);
    for (auto& m : F_) store_in(*store_, m);
    for (auto& m : B_) store_in(*store_, m);
  }
  const Problem& p_;
  Form form_;
  const FloatFormat* store_;
  Vec<T> x_, q_;
  std::vector<Mat<T>> M_, F_, B_;  // F_: Potter factor, or R of the closed form
};

/// Asymmetry ||P - P^T||_F / ||P||_F, smallest eigenvalue over largest
/// magnitude of the symmetric part (negative: definiteness lost), and ||P||_2.
struct PStats {
  double asym = 0, mineig = std::numeric_limits<double>::infinity(), norm = 0;
};
PStats p_stats(const std::vector<Eigen::MatrixXd>& Ps) {
  PStats r;
  for (const auto& P : Ps) {
    if (!P.allFinite()) return {kNaN, kNaN, std::numeric_limits<double>::infinity()};
    const double s = P.cwiseAbs().maxCoeff();
    if (s == 0) continue;
    const Eigen::MatrixXd A = P / s;
    r.asym = std::max(r.asym, (A - A.transpose()).norm() / A.norm());
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(0.5 * (A + A.transpose()), Eigen::EigenvaluesOnly);
    const double big = es.eigenvalues().cwiseAbs().maxCoeff();
    r.mineig = std::min(r.mineig, es.eigenvalues().minCoeff() / big);
    r.norm = std::max(r.norm, big * s);
  }
  return r;
}

// err_readout: the memory readout M q; err_h: the whole read x + M q; err_M:
// the memories; then P's asymmetry, smallest eigenvalue (relative) and norm.
const std::vector<std::string> kMetrics{"err_readout", "err_h", "err_M", "asym_P", "mineig_P", "norm_P"};

std::vector<double> metric(const Snap& run, const Snap& ref, bool full) {
  std::vector<double> m{rel_err(run.mem, ref.mem), rel_err(run.read, ref.read), rel_err(run.state, ref.state), kNaN,
                        kNaN, kNaN};
  if (!full) return m;
  const PStats ps = p_stats(run.P);
  m[3] = ps.asym;
  m[4] = ps.mineig;
  m[5] = ps.norm;
  return m;
}

/// The reference's self-check: group 0's information form at 667 bits,
/// solved at a few layers and compared with the reference's M.
class Check {
 public:
  Check(const Problem& p, const ClassStepper<Ref>& ref) : p_(p), ref_(ref) {
    R_ = Mat<Hi>::Identity(p.dk, p.dk) / Hi(p.alpha);
    B_ = Mat<Hi>::Zero(p.dv, p.dk);
    for (int l : {p.L / 4, p.L / 2, p.L - 1}) at_.push_back(l);
  }
  void operator()(int l) {
    const auto& a = p_.a[l];
    const Vec<Hi> k = convert<Hi>(Vec<double>(a.k.head(p_.dk)));
    const Vec<Hi> v = convert<Hi>(Vec<double>(p_.v[l].head(p_.dv)));
    rls_information_step<Hi>(R_, B_, k, v, Hi(a.omega(0)), Hi(p_.lambda(l, 0)));
    if (std::find(at_.begin(), at_.end(), l) == at_.end()) return;
    const Mat<Hi> M = rls_closed_form_solve<Hi>(R_, B_);
    const Mat<Hi> got = ref_.M(0).template cast<Hi>();
    const Hi n = M.norm();
    worst_ = std::max(worst_, to_double(Hi(n == 0 ? got.norm() : Hi((got - M).norm() / n))));
  }
  double worst() const { return worst_; }

 private:
  const Problem& p_;
  const ClassStepper<Ref>& ref_;
  Mat<Hi> R_, B_;
  std::vector<int> at_;
  double worst_ = 0;
};

PUpdate pupdate(Form f) {
  return f == Form::naive ? PUpdate::naive : f == Form::joseph ? PUpdate::joseph : PUpdate::symmetric;
}

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

struct Conf {
  std::string sweep;
  Keys keys;
  double lambda, omega;
  std::uint64_t seed;
};

std::vector<Result> run_conf(const Sizes& z, const Conf& c) {
  const Problem p = make_problem(z, c.keys, c.lambda, c.omega, c.seed);
  ClassStepper<Ref> ref(p, PUpdate::symmetric, nullptr);
  Check check(p, ref);
  Result meta;
  meta.scheme = "ldm";
  meta.sweep = c.sweep;
  meta.metrics = kMetrics;
  meta.config = {{"keys", keys_name(c.keys)}, {"lambda", num(c.lambda)}, {"omega", num(c.omega)}};
  // Every dtype for the formulation sweep; the four that matter most elsewhere.
  const std::vector<Dtype> dtypes =
      c.sweep == "forms"
          ? std::vector<Dtype>{Dtype::fp64, Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::bf16_store, Dtype::fp16_store}
          : std::vector<Dtype>{Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::bf16_store};
  std::vector<Candidate> cands;
  for (Form f : {Form::naive, Form::symmetric, Form::joseph, Form::potter, Form::closed}) {
    meta.form = form_name(f);
    auto cs = candidates(meta, dtypes, [&](Dtype d) {
      return f == Form::potter || f == Form::closed ? make_stepper<FormStepper>(d, p, f)
                                                    : make_stepper<ClassStepper>(d, p, pupdate(f));
    });
    for (auto& k : cs) cands.push_back(std::move(k));
  }
  std::vector<Result> out;
  lockstep(ref, cands, p.L, metric, out, [&](int l) { check(l); }, /*dense=*/false);
  for (auto& r : out) r.ref_check = check.worst();
  return out;
}

}  // namespace

std::vector<Task> ldm_tasks(const Sizes& z) {
  std::vector<Conf> confs;
  std::uint64_t seed = 0x1d0000;
  for (double lambda : {0.5, 0.7, 0.9, 0.99, 1.0}) confs.push_back({"forms", Keys::random, lambda, 1, ++seed});
  for (Keys k : {Keys::collinear, Keys::rankdef})
    for (double lambda : {0.5, 0.7, 0.9, 0.99}) confs.push_back({"keys", k, lambda, 1, ++seed});
  for (double omega : {0.0, 2.0}) confs.push_back({"omega", Keys::random, 0.9, omega, ++seed});
  std::vector<Task> t;
  for (const auto& c : confs) t.push_back([z, c] { return run_conf(z, c); });
  return t;
}

}  // namespace dmref::stability
