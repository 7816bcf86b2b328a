// Stability sweeps of RLS Linear Depth Memory (dmref/stability.hpp): eight
// formulations of the memory write (naive, symmetric, Joseph: ldm.hpp's
// PUpdate; Potter square root, inverse QR-RLS, QR-RLS, U-D (Bierman) and the
// information-form closed form: rls_forms.hpp) in every dtype, against the
// symmetric recursion at 257 bits, which is itself checked against the
// 667-bit closed form; with in-kernel detectors of a bad P and their lead time.
#include "dmref/ldm.hpp"
#include "dmref/lowp.hpp"
#include "dmref/rls_forms.hpp"
#include "dmref/scalar.hpp"  // mp77, mp200
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

enum class Form { naive, symmetric, joseph, potter, inverse_qr, qr, ud, closed };
const char* form_name(Form f) {
  switch (f) {
    case Form::naive: return "naive";
    case Form::symmetric: return "symmetric";
    case Form::joseph: return "joseph";
    case Form::potter: return "potter";
    case Form::inverse_qr: return "inverse-qr";
    case Form::qr: return "qr";
    case Form::ud: return "ud";
    case Form::closed: return "closed-form";
  }
  return "?";
}
constexpr Form kForms[] = {Form::naive, Form::symmetric, Form::joseph, Form::potter,
                           Form::inverse_qr, Form::qr, Form::ud, Form::closed};

// In-kernel detectors of a bad P, evaluated as layer l is written, from the
// state layer l - 1 left (P as stored, in double) and layer l's key:
//   conv    the conversion factor lambda / (lambda + w k^T P k) outside (0, 1]
//           (for w > 0 the same test as k^T P k < 0, or a NaN)
//   diag    a diagonal entry of P <= 0
//   chol    the Cholesky factorisation of (P + P^T) / 2 fails (in double)
//   trace   trace(P) > 100 dk alpha (P_{-1} = alpha I has trace dk alpha)
//   PR      ||P R - I||_F / sqrt(dk) > 0.1, R = lambda R + w k k^T accumulated
//           beside the run in its arithmetic (R_{-1} = I / alpha)
const std::vector<std::string> kAlarms{"conv", "diag", "chol", "trace", "PR"};
constexpr double kTraceCeiling = 100, kPRTolerance = 0.1;

/// One draw of a kernel-level LDM problem (inputs of one sweep configuration), in doubles (all on the shared 16-bit grid, the
/// scalars float32).
struct LdmDraw {
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
struct Shape {
  int L, G, dk, dv;
};

LdmDraw draw_ldm(const Shape& z, Keys keys, double lambda, double omega_decades, std::uint64_t seed) {
  Normal N(seed);
  LdmDraw p;
  p.G = z.G, p.dk = z.dk, p.dv = z.dv, p.L = z.L, p.d = p.G * p.dv;
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
struct DrawAddresses {
  const LdmDraw* p;
  Address<T> operator()(int l, const Vec<T>&, const Vec<T>&) const {
    const auto& a = p->a.at(l);
    return {convert<T>(a.q), convert<T>(a.k), convert<T>(a.omega)};
  }
};

template <class T>
LdmConfig<T> config(const LdmDraw& p, PUpdate how) {
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

/// The detectors (kAlarms) of one run: check(l, P_of) evaluates them as layer
/// l is written, P_of(g) giving group g's P (in double) as layer l - 1 left it;
/// `fired` holds this layer's verdicts. R of the PR test is accumulated in the
/// run's arithmetic type T.
class Detectors {
 public:
  explicit Detectors(const LdmDraw& p) : p_(p), fired(kAlarms.size(), 0) {}
  template <class T, class PFn>
  void check(int l, PFn&& P_of) {
    if (R_.empty())
      for (int g = 0; g < p_.G; ++g) R_.push_back(Eigen::MatrixXd::Identity(p_.dk, p_.dk) / p_.alpha);
    std::fill(fired.begin(), fired.end(), 0);
    const auto& a = p_.a[l];
    for (int g = 0; g < p_.G; ++g) {
      const Eigen::MatrixXd P = P_of(g);
      const Eigen::VectorXd k = a.k.segment(g * p_.dk, p_.dk);
      const double w = a.omega(g), lambda = p_.lambda(l, g);
      const double kPk = k.dot(P * k), conv = lambda / (lambda + w * kPk);
      if (!(conv > 0 && conv <= 1)) fired[0] = 1;
      if (!(P.diagonal().minCoeff() > 0)) fired[1] = 1;
      if (!P.allFinite() || Eigen::LLT<Eigen::MatrixXd>(0.5 * (P + P.transpose())).info() != Eigen::Success) fired[2] = 1;
      if (!(P.trace() <= kTraceCeiling * p_.dk * p_.alpha)) fired[3] = 1;
      if (!((P * R_[g] - Eigen::MatrixXd::Identity(p_.dk, p_.dk)).norm() / std::sqrt(double(p_.dk)) <= kPRTolerance))
        fired[4] = 1;
      // R after layer l, in T: lambda R + w k k^T.
      Mat<T> R = convert<T>(Mat<double>(R_[g]));
      const Vec<T> kt = convert<T>(Vec<double>(k));
      R = T(lambda) * R + (T(w) * kt) * kt.transpose();
      R_[g] = to_d<T>(R);
    }
  }

 private:
  const LdmDraw& p_;
  std::vector<Eigen::MatrixXd> R_;

 public:
  std::vector<char> fired;
};

/// Remedies for a P gone bad, applied to the P-based forms after each write
/// (the measured variants of docs/stability.md; their error is against exact
/// RLS, so it includes the bias they introduce):
///   reset      P <- alpha I in a group whose detector conv, diag or chol fired
///   trace-cap  P <- P c / trace(P) when trace(P) > c = 100 dk alpha (the trace detector's ceiling)
///   leakage    P <- P (I + (1 - lambda) delta P)^-1, delta = 1 / (100 alpha): the
///              ridge (1 - lambda) delta I added to R every layer, so that R >= delta
///              I in the limit and P <= 100 alpha I (computed in double from the
///              stored P, rounded back)
///   directional directional forgetting: the write is rls_forms.hpp's
///              rls_directional_step (forget only along k; no wind-up), in T arithmetic
enum class Remedy { none, reset, trace_cap, leakage, directional };
const char* remedy_name(Remedy r) {
  switch (r) {
    case Remedy::none: return "";
    case Remedy::reset: return "+reset";
    case Remedy::trace_cap: return "+trace-cap";
    case Remedy::leakage: return "+leakage";
    case Remedy::directional: return "+directional";
  }
  return "?";
}

/// The naive, symmetric and Joseph forms: ldm.hpp's LinearDepthMemory itself.
template <class T>
class ClassStepper : public Stepper {
 public:
  using Scheme = LinearDepthMemory<T, DrawAddresses<T>>;
  ClassStepper(const LdmDraw& p, PUpdate how, Remedy remedy, Storage store)
      : p_(p), m_(config<T>(p, how), DrawAddresses<T>{&p}), remedy_(remedy), store_(store), det_(p) {
    st_ = m_.init(convert<T>(p.e));
    keep();
  }
  void step(int l) override {
    det_.check<T>(l, [&](int g) { return to_d<T>(st_.mem[g].P); });
    if (remedy_ == Remedy::directional)
      directional_write(l);
    else
      m_.write(st_, l, convert<T>(p_.v[l]));
    remedy(l);
    keep();
  }
  void snap(Snap& s, bool full) override {
    s.mem = to_d<T>(m_.readout(st_));
    s.read = to_d<T>(m_.read(st_, 0));
    s.state.resize(p_.G * p_.dv * p_.dk);
    s.finite = finite<T>(st_.x);
    s.alarms = det_.fired;
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
  /// LinearDepthMemory::write with directional forgetting (Remedy::directional).
  void directional_write(int l) {
    const Vec<T> v = convert<T>(p_.v[l]);
    st_.x += v;
    const Address<T> a = DrawAddresses<T>{&p_}(l, st_.x, st_.x);
    for (int g = 0; g < p_.G; ++g) {
      Mat<T>& M = st_.mem[g].M;
      Mat<T>& P = st_.mem[g].P;
      const Vec<T> k = a.k.segment(g * p_.dk, p_.dk), vg = v.segment(g * p_.dv, p_.dv);
      rls_directional_step<T>(M, P, k, vg, a.omega(g), T(p_.lambda(l, g)));
    }
    st_.q = a.q;
  }
  void remedy(int l) {
    const T alpha(p_.alpha);
    const double cap = kTraceCeiling * p_.dk * p_.alpha;
    const bool bad = det_.fired[0] || det_.fired[1] || det_.fired[2];
    for (int g = 0; g < p_.G; ++g) {
      Mat<T>& P = st_.mem[g].P;
      switch (remedy_) {
        case Remedy::none: break;
        case Remedy::directional: break;  // in the write
        case Remedy::reset:
          if (bad) P = alpha * Mat<T>::Identity(p_.dk, p_.dk);
          break;
        case Remedy::trace_cap: {
          const double tr = to_double(T(P.trace()));
          if (tr > cap) P *= T(cap / tr);
          break;
        }
        case Remedy::leakage: {
          const Eigen::MatrixXd Pd = to_d<T>(P);
          const double c = (1 - p_.lambda(l, g)) / (kTraceCeiling * p_.alpha);
          const Eigen::MatrixXd A = Eigen::MatrixXd::Identity(p_.dk, p_.dk) + c * Pd;
          const Eigen::MatrixXd Pn = A.transpose().partialPivLu().solve(Pd.transpose()).transpose();  // P A^-1
          P = convert<T>(Mat<double>(0.5 * (Pn + Pn.transpose())));
          break;
        }
      }
    }
  }
  void keep() {  // mixed precision: the state as stored between layers
    if (store_.has(kStoreStream)) {
      store_in(*store_.f, st_.x);
      store_in(*store_.f, st_.q);
    }
    for (auto& G : st_.mem) {
      if (store_.has(kStoreMemory)) store_in(*store_.f, G.M);
      if (store_.has(kStoreCovariance)) store_in(*store_.f, G.P);
    }
  }
  const LdmDraw& p_;
  Scheme m_;
  typename Scheme::State st_;
  Remedy remedy_;
  Storage store_;
  Detectors det_;
};

/// The forms of rls_forms.hpp (Potter, inverse QR, QR, U-D, closed form) with
/// LDM's read: h = x + concat_g M_g q_g.
template <class T>
class FormStepper : public Stepper {
 public:
  FormStepper(const LdmDraw& p, Form form, Storage store) : p_(p), form_(form), store_(store), det_(p) {
    x_ = convert<T>(p.e);
    q_ = Vec<T>::Zero(p.G * p.dk);
    const T alpha(p.alpha);
    for (int g = 0; g < p.G; ++g) {
      M_.push_back(Mat<T>::Zero(p.dv, p.dk));
      Mat<T> F, B;
      Vec<T> D;
      switch (form) {
        case Form::potter: F = rls_potter_init<T>(p.dk, alpha); break;
        case Form::inverse_qr: F = rls_inverse_qr_init<T>(p.dk, alpha); break;
        case Form::qr: rls_qr_init<T>(p.dk, p.dv, alpha, F, B); break;
        case Form::ud: rls_ud_init<T>(p.dk, alpha, F, D); break;
        default: F = Mat<T>::Identity(p.dk, p.dk) / alpha, B = Mat<T>::Zero(p.dv, p.dk); break;  // R_{-1} = I / alpha
      }
      F_.push_back(F);
      B_.push_back(B);
      D_.push_back(D);
    }
    keep();
  }
  void step(int l) override {
    det_.check<T>(l, [&](int g) { return P_of(g); });
    x_ += convert<T>(p_.v[l]);
    const auto& a = p_.a[l];
    const int dk = p_.dk, dv = p_.dv;
    for (int g = 0; g < p_.G; ++g) {
      const Vec<T> k = convert<T>(Vec<double>(a.k.segment(g * dk, dk)));
      const Vec<T> v = convert<T>(Vec<double>(p_.v[l].segment(g * dv, dv)));
      const T w(a.omega(g)), lambda(p_.lambda(l, g));
      switch (form_) {
        case Form::potter: rls_potter_step<T>(M_[g], F_[g], k, v, w, lambda); break;
        case Form::inverse_qr: rls_inverse_qr_step<T>(M_[g], F_[g], k, v, w, lambda); break;
        case Form::qr: rls_qr_step<T>(F_[g], B_[g], k, v, w, lambda); break;
        case Form::ud: rls_ud_step<T>(M_[g], F_[g], D_[g], k, v, w, lambda); break;
        default: rls_information_step<T>(F_[g], B_[g], k, v, w, lambda); break;
      }
    }
    q_ = convert<T>(a.q);
    keep();
    // The memories of the QR and closed forms are derived from their (stored) state.
    for (int g = 0; g < p_.G; ++g) {
      if (form_ == Form::qr) M_[g] = rls_qr_memory<T>(F_[g], B_[g]);
      if (form_ == Form::closed) M_[g] = rls_closed_form_solve<T>(F_[g], B_[g]);
    }
  }
  void snap(Snap& s, bool full) override {
    const int dk = p_.dk, dv = p_.dv;
    Vec<T> r(p_.d);
    for (int g = 0; g < p_.G; ++g) r.segment(g * dv, dv) = M_[g] * Vec<T>(q_.segment(g * dk, dk));
    s.mem = to_d<T>(r);
    s.read = to_d<T>(Vec<T>(x_ + r));
    s.state.resize(p_.G * dv * dk);
    s.finite = finite<T>(x_);
    s.alarms = det_.fired;
    s.P.clear();
    for (int g = 0; g < p_.G; ++g) {
      s.state.segment(g * dv * dk, dv * dk) = Eigen::Map<const Eigen::VectorXd>(to_d<T>(M_[g]).data(), dv * dk);
      s.finite = s.finite && finite<T>(M_[g]) && finite<T>(F_[g]) && finite<T>(B_[g]) && finite<T>(D_[g]);
      if (full) s.P.push_back(P_of(g));
    }
  }

 private:
  /// Group g's P (in double) implied by the stored state.
  Eigen::MatrixXd P_of(int g) const {
    const Eigen::MatrixXd F = to_d<T>(F_[g]);
    switch (form_) {
      case Form::potter:
      case Form::inverse_qr: return F * F.transpose();
      case Form::qr: {
        const Eigen::MatrixXd Ci = solve_upper<double>(F, Eigen::MatrixXd::Identity(p_.dk, p_.dk));
        return Ci * Ci.transpose();
      }
      case Form::ud: return rls_ud_P<double>(F, to_d<T>(D_[g]));
      default: return inverse_spd(F);
    }
  }
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
  void keep() {  // mixed precision: the state as stored between layers
    if (store_.has(kStoreStream)) {
      store_in(*store_.f, x_);
      store_in(*store_.f, q_);
    }
    for (int g = 0; g < p_.G; ++g) {
      if (store_.has(kStoreMemory)) {
        store_in(*store_.f, M_[g]);
        store_in(*store_.f, B_[g]);
      }
      if (store_.has(kStoreCovariance)) {
        store_in(*store_.f, F_[g]);
        store_in(*store_.f, D_[g]);
      }
    }
  }
  const LdmDraw& p_;
  Form form_;
  Storage store_;
  Detectors det_;
  Vec<T> x_, q_;
  std::vector<Mat<T>> M_, F_, B_;  // F_: the factor (Potter F, inverse-QR S, QR C, U-D U) or the closed form's R;
  std::vector<Vec<T>> D_;          // B_: the closed form's B, QR's Z; D_: U-D's D
};

/// Asymmetry ||P - P^T||_F / ||P||_F, smallest eigenvalue over largest
/// magnitude of the symmetric part (negative: definiteness lost), and ||P||_2.
struct PStats {
  double asym = 0, mineig = std::numeric_limits<double>::infinity(), norm = 0, cond = 0;
};
PStats p_stats(const std::vector<Eigen::MatrixXd>& Ps) {
  PStats r;
  for (const auto& P : Ps) {
    if (!P.allFinite()) return {kNaN, kNaN, std::numeric_limits<double>::infinity(), kNaN};
    const double s = P.cwiseAbs().maxCoeff();
    if (s == 0) continue;
    const Eigen::MatrixXd A = P / s;
    r.asym = std::max(r.asym, (A - A.transpose()).norm() / A.norm());
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(0.5 * (A + A.transpose()), Eigen::EigenvaluesOnly);
    const double big = es.eigenvalues().cwiseAbs().maxCoeff();
    const double lo = es.eigenvalues().minCoeff() / big;
    r.mineig = std::min(r.mineig, lo);
    r.norm = std::max(r.norm, big * s);
    r.cond = std::max(r.cond, lo > 0 ? 1 / lo : std::numeric_limits<double>::infinity());
  }
  return r;
}

// err_readout: the memory readout M q; err_h: the whole read x + M q; err_M:
// the memories; then P's asymmetry, smallest eigenvalue (relative), norm and
// condition number (the worst group; inf once P is not positive definite),
// and the condition number of the reference's P.
const std::vector<std::string> kMetrics{"err_readout", "err_h",  "err_M",  "asym_P",
                                        "mineig_P",    "norm_P", "cond_P", "cond_P_ref"};

std::vector<double> metric(const Snap& run, const Snap& ref, bool full) {
  std::vector<double> m{rel_err(run.mem, ref.mem), rel_err(run.read, ref.read), rel_err(run.state, ref.state), kNaN,
                        kNaN, kNaN, kNaN, kNaN};
  if (!full) return m;
  const PStats ps = p_stats(run.P);
  m[3] = ps.asym;
  m[4] = ps.mineig;
  m[5] = ps.norm;
  m[6] = ps.cond;
  m[7] = p_stats(ref.P).cond;
  return m;
}

/// The reference's self-check: group 0's information form at 667 bits,
/// solved at a few layers and compared with the reference's M.
class Check {
 public:
  Check(const LdmDraw& p, const ClassStepper<Ref>& ref) : p_(p), ref_(ref) {
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
  const LdmDraw& p_;
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
  Shape shape;
  std::vector<Dtype> dtypes;
  std::vector<Form> forms;
  std::vector<Remedy> remedies{Remedy::none};  // for the P-based forms
};

std::vector<Result> run_conf(const Conf& c, std::uint64_t seed) {
  const LdmDraw p = draw_ldm(c.shape, c.keys, c.lambda, c.omega, seed);
  ClassStepper<Ref> ref(p, PUpdate::symmetric, Remedy::none, Storage{});
  Check check(p, ref);
  Result meta;
  meta.scheme = "ldm";
  meta.sweep = c.sweep;
  meta.metrics = kMetrics;
  meta.alarms = kAlarms;
  meta.config = {{"keys", keys_name(c.keys)}, {"lambda", num(c.lambda)}, {"omega", num(c.omega)},
                 {"G", std::to_string(p.G)},  {"dk", std::to_string(p.dk)}};
  std::vector<Candidate> cands;
  for (Form f : c.forms) {
    const bool class_form = f == Form::naive || f == Form::symmetric || f == Form::joseph;
    for (Remedy rm : class_form ? c.remedies : std::vector<Remedy>{Remedy::none}) {
      meta.form = std::string(form_name(f)) + remedy_name(rm);
      auto cs = candidates(meta, c.dtypes, [&](Dtype d) {
        return class_form ? make_stepper<ClassStepper>(d, p, pupdate(f), rm) : make_stepper<FormStepper>(d, p, f);
      });
      for (auto& k : cs) cands.push_back(std::move(k));
    }
  }
  std::vector<Result> out;
  lockstep(ref, cands, p.L, metric, out, [&](int l) { check(l); });
  for (auto& r : out) r.ref_check = check.worst();
  return out;
}

}  // namespace

std::vector<Task> remedy_tasks(const Sizes& z) {
  using D = Dtype;
  const Shape base{z.ldm_layers, z.ldm_groups, z.ldm_dk, z.ldm_dv};
  const std::vector<Remedy> rms{Remedy::none, Remedy::reset, Remedy::trace_cap, Remedy::leakage, Remedy::directional};
  std::vector<Conf> confs;
  for (double lambda : {0.5, 0.7, 0.9, 1.0})
    confs.push_back({"remedies", Keys::random, lambda, 1, base, {D::fp32, D::bf16_store}, {Form::symmetric, Form::inverse_qr}, rms});
  for (double lambda : {0.7, 0.9})
    confs.push_back({"remedies", Keys::rankdef, lambda, 1, base, {D::fp32, D::bf16_store}, {Form::symmetric, Form::inverse_qr}, rms});
  std::vector<Task> t;
  std::uint64_t seed = 0x1e0000;
  for (const auto& c : confs) seeded(t, z, ++seed, [c](std::uint64_t s) { return run_conf(c, s); });
  return t;
}

std::vector<Task> ldm_tasks(const Sizes& z) {
  using D = Dtype;
  const std::vector<Form> all(std::begin(kForms), std::end(kForms));
  const Shape base{z.ldm_layers, z.ldm_groups, z.ldm_dk, z.ldm_dv};
  const std::vector<D> every{D::fp64, D::fp32, D::bf16, D::fp16, D::bf16_store, D::fp16_store, D::bf16_x, D::bf16_M, D::bf16_P};
  std::vector<Conf> confs;
  for (double lambda : {0.5, 0.7, 0.9, 0.99, 1.0}) confs.push_back({"forms", Keys::random, lambda, 1, base, every, all});
  for (Keys k : {Keys::collinear, Keys::rankdef})
    for (double lambda : {0.5, 0.7, 0.9, 0.99})
      confs.push_back({"keys", k, lambda, 1, base, {D::fp32, D::fp16, D::bf16_store, D::bf16_P}, all});
  for (double omega : {0.0, 2.0}) confs.push_back({"omega", Keys::random, 0.9, omega, base, {D::fp32, D::bf16_store}, all});
  // Scale: the paper's G = 16, dk = dv = 4, and one group of dk = dv = 64 and 128.
  for (const Shape& sh : {Shape{z.scale_layers, 16, 4, 4}, Shape{z.scale_layers, 1, 64, 64}, Shape{z.scale_layers, 1, 128, 128}})
    for (double lambda : {0.9, 0.99})
      confs.push_back({"scale", Keys::random, lambda, 1, sh, {D::fp32, D::bf16_store, D::bf16_P}, all});
  // Conditioning: cond(P) of the reference over dk and lambda (one cheap candidate).
  for (int dk : {4, 8, 16, 32, 64, 128})
    for (double lambda : {0.5, 0.7, 0.9, 0.99})
      confs.push_back({"cond", Keys::random, lambda, 1, Shape{z.scale_layers, 1, dk, 4}, {D::fp32}, {Form::symmetric}});
  std::vector<Task> t;
  std::uint64_t seed = 0x1d0000;
  for (const auto& c : confs) seeded(t, z, ++seed, [c](std::uint64_t s) { return run_conf(c, s); });
  return t;
}

}  // namespace dmref::stability
