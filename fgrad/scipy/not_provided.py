"""The one table of what `fgrad.scipy` does not provide, each entry with its reason.

Keys are SciPy names: ``"special.<name>"`` for a ``scipy.special`` callable,
``"stats.<dist>"`` for a ``scipy.stats`` distribution fgrad does not have, and
``"stats.<dist>.<method>"`` for a method of one it has (``"stats.*.<method>"``
for every distribution). A test (tests/test_scipy_coverage.py) enumerates
SciPy's callables and distribution methods: each is either provided, with a
property spec, or here; and docs/scipy.md shows `markdown_table` of this table.

>>> NOT_PROVIDED["special.comb"]
'integer arguments: there is no derivative to take'
"""
_UTIL = (
    "SpecialFunctionError", "SpecialFunctionWarning", "errstate", "geterr", "seterr", "test",
)
_TABLES = (
    "ai_zeros", "assoc_legendre_p_all", "bei_zeros", "beip_zeros", "ber_zeros", "bernoulli",
    "berp_zeros", "bi_zeros", "c_roots", "cg_roots", "chebyc", "chebys", "chebyt", "chebyu",
    "erf_zeros", "euler", "fresnel_zeros", "fresnelc_zeros", "fresnels_zeros", "gegenbauer",
    "genlaguerre", "h_roots", "he_roots", "hermite", "hermitenorm", "j_roots", "jacobi",
    "jn_zeros", "jnjnp_zeros", "jnp_zeros", "jnyn_zeros", "js_roots", "kei_zeros",
    "keip_zeros", "kelvin_zeros", "ker_zeros", "kerp_zeros", "l_roots", "la_roots", "laguerre",
    "legendre", "legendre_p_all", "lqmn", "lqn", "mathieu_even_coef", "mathieu_odd_coef",
    "obl_cv_seq", "p_roots", "pbdn_seq", "pbdv_seq", "pbvv_seq", "pro_cv_seq", "ps_roots",
    "riccati_jn", "riccati_yn", "roots_chebyc", "roots_chebys", "roots_chebyt", "roots_chebyu",
    "roots_gegenbauer", "roots_genlaguerre", "roots_hermite", "roots_hermitenorm",
    "roots_jacobi", "roots_laguerre", "roots_legendre", "roots_sh_chebyt", "roots_sh_chebyu",
    "roots_sh_jacobi", "roots_sh_legendre", "s_roots", "sh_chebyt", "sh_chebyu", "sh_jacobi",
    "sh_legendre", "sph_harm_y_all", "sph_legendre_p_all", "t_roots", "ts_roots", "u_roots",
    "us_roots", "y0_zeros", "y1_zeros", "y1p_zeros", "yn_zeros", "ynp_zeros",
)
_INTEGER = (
    "comb", "factorial", "factorial2", "factorialk", "perm", "stirling2",
)
_ELEMENTARY = (
    "agm", "binom", "boxcox", "boxcox1p", "cbrt", "cosdg", "cosm1", "cotdg", "diric", "exp10",
    "exp2", "expm1", "exprel", "huber", "inv_boxcox", "inv_boxcox1p", "kl_div", "log1p",
    "log_expit", "loggamma", "poch", "powm1", "pseudo_huber", "radian", "rel_entr", "round",
    "sinc", "sindg", "softplus", "tandg",
)
_BESSEL = (
    "airy", "airye", "bei", "beip", "ber", "berp", "besselpoly", "h1vp", "h2vp", "hankel1",
    "hankel1e", "hankel2", "hankel2e", "i0e", "i1e", "it2i0k0", "it2j0y0", "it2struve0",
    "itairy", "iti0k0", "itj0y0", "itmodstruve0", "itstruve0", "ivp", "jv", "jve", "jvp", "k0",
    "k0e", "k1", "k1e", "kei", "keip", "kelvin", "ker", "kerp", "kn", "kve", "kvp",
    "modstruve", "spherical_in", "spherical_jn", "spherical_kn", "spherical_yn", "struve",
    "yv", "yve",
)
_DIST_FUNCTIONS = (
    "bdtr", "bdtrc", "bdtri", "bdtrik", "bdtrin", "betaincc", "betainccinv", "betaincinv",
    "btdtria", "btdtrib", "chdtr", "chdtrc", "chdtri", "chdtriv", "chndtr", "chndtridf",
    "chndtrinc", "chndtrix", "fdtr", "fdtrc", "fdtri", "fdtridfd", "gammainccinv",
    "gammaincinv", "gdtr", "gdtrc", "gdtria", "gdtrib", "gdtrix", "kolmogi", "kolmogorov",
    "nbdtr", "nbdtrc", "nbdtri", "nbdtrik", "nbdtrin", "ncfdtr", "ncfdtri", "ncfdtridfd",
    "ncfdtridfn", "ncfdtrinc", "nctdtr", "nctdtridf", "nctdtrinc", "nctdtrit", "ndtri",
    "ndtri_exp", "nrdtrimn", "nrdtrisd", "owens_t", "pdtr", "pdtrc", "pdtri", "pdtrik",
    "smirnov", "smirnovi", "stdtridf", "stdtrit", "tklmbda",
)
_OTHER = (
    "assoc_laguerre", "assoc_legendre_p", "dawsn", "ellip_harm", "ellip_harm_2",
    "ellip_normal", "ellipe", "ellipeinc", "ellipj", "ellipk", "ellipkinc", "ellipkm1",
    "elliprc", "elliprd", "elliprf", "elliprg", "elliprj", "erfcx", "erfi", "eval_chebyc",
    "eval_chebys", "eval_chebyt", "eval_chebyu", "eval_gegenbauer", "eval_genlaguerre",
    "eval_hermite", "eval_hermitenorm", "eval_jacobi", "eval_laguerre", "eval_legendre",
    "eval_sh_chebyt", "eval_sh_chebyu", "eval_sh_jacobi", "eval_sh_legendre", "exp1", "expi",
    "expn", "fresnel", "hyp0f1", "hyp1f1", "hyp2f1", "hyperu", "lambertw", "legendre_p",
    "lmbda", "log_wright_bessel", "lpmv", "mathieu_a", "mathieu_b", "mathieu_cem",
    "mathieu_modcem1", "mathieu_modcem2", "mathieu_modsem1", "mathieu_modsem2", "mathieu_sem",
    "modfresnelm", "modfresnelp", "obl_ang1", "obl_ang1_cv", "obl_cv", "obl_rad1",
    "obl_rad1_cv", "obl_rad2", "obl_rad2_cv", "pbdv", "pbvv", "pbwa", "pro_ang1",
    "pro_ang1_cv", "pro_cv", "pro_rad1", "pro_rad1_cv", "pro_rad2", "pro_rad2_cv", "shichi",
    "sici", "spence", "sph_harm_y", "sph_legendre_p", "voigt_profile", "wofz", "wright_bessel",
    "wrightomega", "yvp", "zetac",
)
_DISTRIBUTIONS = (
    "alpha", "anglit", "arcsine", "argus", "bernoulli", "betabinom", "betanbinom", "betaprime",
    "boltzmann", "bradford", "burr", "burr12", "chi", "cosine", "crystalball", "dgamma",
    "dirichlet_multinomial", "dlaplace", "dpareto_lognorm", "dweibull", "erlang", "exponnorm",
    "exponpow", "exponweib", "f", "fatiguelife", "fisk", "foldcauchy", "foldnorm",
    "gausshyper", "genexpon", "genextreme", "gengamma", "genhalflogistic", "genhyperbolic",
    "geninvgauss", "genlogistic", "gennorm", "genpareto", "geom", "gibrat", "gompertz",
    "gumbel_l", "gumbel_r", "halfcauchy", "halfgennorm", "halflogistic", "halfnorm",
    "hypergeom", "hypsecant", "invgamma", "invgauss", "invweibull", "invwishart", "irwinhall",
    "jf_skew_t", "johnsonsb", "johnsonsu", "kappa3", "kappa4", "ksone", "kstwo", "kstwobign",
    "landau", "laplace_asymmetric", "levy", "levy_l", "levy_stable", "loggamma", "loglaplace",
    "lognorm", "logser", "loguniform", "lomax", "matrix_normal", "matrix_t", "maxwell",
    "mielke", "moyal", "multinomial", "multivariate_hypergeom", "multivariate_t", "nakagami",
    "ncf", "nchypergeom_fisher", "nchypergeom_wallenius", "nct", "ncx2", "nhypergeom",
    "normal_inverse_gamma", "norminvgauss", "pareto", "pearson3", "planck", "poisson_binom",
    "powerlaw", "powerlognorm", "powernorm", "randint", "random_table", "rayleigh", "rdist",
    "recipinvgauss", "reciprocal", "rel_breitwigner", "rice", "semicircular", "skellam",
    "skewcauchy", "skewnorm", "studentized_range", "trapezoid", "triang", "truncexpon",
    "truncnorm", "truncpareto", "truncweibull_min", "tukeylambda", "vonmises",
    "vonmises_fisher", "vonmises_line", "wald", "weibull_max", "weibull_min", "wishart",
    "wrapcauchy", "yulesimon", "zipf", "zipfian",
)

_SUMMARIES = ("mean", "var", "std", "median", "moment", "generic_moment", "stats", "interval",
              "expect", "support", "vecentropy", "cov")

NOT_PROVIDED = {
    **dict.fromkeys((f"special.{n}" for n in _UTIL),
                    "not a numerical function (errors, warnings, the test runner)"),
    **dict.fromkeys((f"special.{n}" for n in _TABLES),
                    "returns constants (zeros, quadrature nodes, coefficients, polynomial "
                    "objects): nothing to differentiate"),
    **dict.fromkeys((f"special.{n}" for n in _INTEGER),
                    "integer arguments: there is no derivative to take"),
    **dict.fromkeys((f"special.{n}" for n in _ELEMENTARY),
                    "elementary: write it with fgrad.numpy and the functions here (log1p, "
                    "expm1, cbrt, 2 ** x, sinc, gammaln for loggamma, xlogy for rel_entr)"),
    **dict.fromkeys((f"special.{n}" for n in _BESSEL),
                    "another Bessel-type function: not provided yet; iv, ive, kv, jn and yn "
                    "cover the common ones (i0e(x) = ive(0, x), k0(x) = kv(0, x))"),
    **dict.fromkeys((f"special.{n}" for n in _DIST_FUNCTIONS),
                    "a distribution function, complement or inverse under its Cephes name: "
                    "use fgrad.scipy.stats cdf/sf; the inverses and parameter solvers have "
                    "no derivative rule yet"),
    **dict.fromkeys((f"special.{n}" for n in _OTHER),
                    "not provided yet: its derivative needs functions fgrad does not "
                    "evaluate; wrap SciPy's with fgrad.custom_vjp"),
    **dict.fromkeys((f"stats.{n}" for n in _DISTRIBUTIONS),
                    "not provided yet: write its logpdf with fgrad.scipy.special and "
                    "fgrad.numpy"),
    **dict.fromkeys(("stats.*.ppf", "stats.*.isf"),
                    "inverse distribution functions: no derivative rule yet"),
    "stats.*.rvs": "sampling: draw standard variates and transform them (loc + scale * z) "
                   "to differentiate a sample",
    **dict.fromkeys(("stats.*.fit", "stats.*.fit_loc_scale", "stats.*.nnlf"),
                    "fitting: minimise -logpdf(data, params).sum() with fgrad.optim"),
    "stats.*.freeze": "frozen distributions: pass the parameters to each method",
    **dict.fromkeys((f"stats.*.{m}" for m in _SUMMARIES),
                    "summary statistics: not provided yet; closed forms in the parameters "
                    "are one line of fgrad.numpy"),
    **dict.fromkeys(("stats.multivariate_normal.cdf", "stats.multivariate_normal.logcdf"),
                    "a numerical integral (Genz's algorithm) with no derivative rule"),
    **dict.fromkeys(("stats.poisson.entropy", "stats.binom.entropy", "stats.nbinom.entropy"),
                    "a sum over the support with no closed form: not provided yet"),
    "stats.multivariate_normal.marginal": "a new distribution object: slice mean and cov",
}


def markdown_table():
    """The table as Markdown, one row per reason (docs/scipy.md shows it)."""
    by_reason = {}
    for name, reason in NOT_PROVIDED.items():
        by_reason.setdefault(reason, []).append(f"`{name}`")
    rows = ["| Not provided | Why |", "| --- | --- |"]
    rows += [f"| {', '.join(names)} | {reason} |" for reason, names in by_reason.items()]
    return "\n".join(rows) + "\n"
