"""Which TeX may reach MathJax in the frontend: an allow-list of control sequences.

JupyterLab and Notebook 7 typeset the math in ``text/latex``, Markdown and HTML outputs with
MathJax, in the page's origin. Beside math, MathJax's TeX input has macros that set CSS or
attributes on what it draws: ``\\style``, ``\\class``, ``\\cssId``, ``\\bbox[...]``,
``\\mmlToken{mi}[style="..."]``, ``\\href``, ``\\require`` (which loads code) and more. A
``background:url(...)`` or ``cursor:url(...)`` there is fetched on render, with no click: data
out of a sandbox that has no network, or a request to the Jupyter server with the person's
cookies. A deny-list of such macros missed ``\\mmlToken``; this module lists instead what *may*
be used: the math of the base, AMS, boldsymbol, cancel, mathtools-like and color packages, and
the text and font commands, as SymPy, IPython's ``Math``/``Latex`` and people write them.

``refusal(source)`` says why a value may not reach MathJax, or returns None. A value with no
math delimiter at all is never typeset and passes; otherwise no ``url(`` may appear in it in any
spelling, every control sequence in it must be listed (anywhere in it: finding exactly the spans
MathJax treats as math is not attempted), and colour arguments must be plain names or numbers.
The kernel applies it to HTML and Markdown once they are sanitised.
"""

from __future__ import annotations

import html
import re

_GREEK = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa varkappa lambda "
    "mu nu xi omicron pi varpi rho varrho sigma varsigma tau upsilon phi varphi chi psi omega "
    "Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega varGamma varDelta varTheta "
    "varLambda varXi varPi varSigma varUpsilon varPhi varPsi varOmega digamma"
)
_SYMBOLS = (
    "aleph beth gimel daleth hbar hslash imath jmath ell wp Re Im partial infty nabla prime "
    "backprime emptyset varnothing forall exists nexists neg lnot top bot angle measuredangle "
    "sphericalangle triangle triangledown square blacksquare lozenge blacklozenge bigstar "
    "diamond diamondsuit heartsuit spadesuit clubsuit flat natural sharp surd checkmark "
    "complement eth mho Finv Game circledS dagger ddagger ldots cdots vdots ddots dots dotsc "
    "dotsb dotsm dotsi dotso colon Box S P copyright pounds yen maltese degree"
)
_OPERATORS = (
    "pm mp times div cdot ast star circ bullet oplus ominus otimes oslash odot bigcirc setminus "
    "smallsetminus cap cup sqcap sqcup uplus wedge land vee lor amalg wr dotplus ltimes rtimes "
    "leftthreetimes rightthreetimes curlywedge curlyvee barwedge veebar doublebarwedge boxplus "
    "boxminus boxtimes boxdot divideontimes intercal centerdot circledast circledcirc circleddash "
    "triangleleft triangleright bigtriangleup bigtriangledown lhd rhd unlhd unrhd sum prod coprod "
    "int iint iiint iiiint oint intop smallint bigcap bigcup bigsqcup bigvee bigwedge bigodot "
    "bigoplus bigotimes biguplus idotsint"
)
_RELATIONS = (
    "leq le geq ge neq ne lt gt equiv approx approxeq sim simeq cong propto ll gg lll ggg "
    "leqq geqq leqslant geqslant lesssim gtrsim lessapprox gtrapprox lessgtr gtrless subset "
    "supset subseteq supseteq subsetneq supsetneq subseteqq supseteqq sqsubset sqsupset "
    "sqsubseteq sqsupseteq in ni notin owns mid nmid parallel nparallel perp vdash dashv "
    "models vDash Vdash Vvdash smile frown asymp bowtie doteq doteqdot risingdotseq "
    "fallingdotseq eqcirc circeq triangleq bumpeq Bumpeq thicksim thickapprox backsim "
    "backsimeq preceq succeq prec succ precsim succsim precapprox succapprox nless ngtr nleq "
    "ngeq nleqslant ngeqslant lneq gneq lneqq gneqq nsim ncong nsubseteq nsupseteq "
    "subsetneqq supsetneqq npreceq nsucceq nprec nsucc vartriangleleft vartriangleright "
    "trianglelefteq trianglerighteq ntriangleleft ntriangleright ntrianglelefteq "
    "ntrianglerighteq therefore because between pitchfork shortmid shortparallel "
    "nshortmid nshortparallel nvdash nvDash nVdash nVDash Subset Supset eqsim lessdot gtrdot "
    "coloneqq eqqcolon Coloneqq"
)
_ARROWS = (
    "to gets leftarrow rightarrow leftrightarrow Leftarrow Rightarrow Leftrightarrow "
    "longleftarrow longrightarrow longleftrightarrow Longleftarrow Longrightarrow "
    "Longleftrightarrow uparrow downarrow updownarrow Uparrow Downarrow Updownarrow mapsto "
    "longmapsto hookleftarrow hookrightarrow nearrow searrow swarrow nwarrow leftharpoonup "
    "leftharpoondown rightharpoonup rightharpoondown rightleftharpoons leftrightharpoons "
    "iff implies impliedby leadsto nleftarrow nrightarrow nLeftarrow nRightarrow "
    "nleftrightarrow nLeftrightarrow twoheadleftarrow twoheadrightarrow leftleftarrows "
    "rightrightarrows leftrightarrows rightleftarrows upuparrows downdownarrows "
    "curvearrowleft curvearrowright circlearrowleft circlearrowright Lsh Rsh looparrowleft "
    "looparrowright rightsquigarrow leftrightsquigarrow restriction multimap "
    "xleftarrow xrightarrow xmapsto xLeftarrow xRightarrow xleftrightarrow xLeftrightarrow "
    "dashleftarrow dashrightarrow Lleftarrow Rrightarrow"
)
_DELIMITERS = (
    "left right middle big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr Biggl Biggr bigm Bigm "
    "biggm Biggm langle rangle lbrace rbrace lbrack rbrack lfloor rfloor lceil rceil vert Vert "
    "lvert rvert lVert rVert backslash ulcorner urcorner llcorner lrcorner lgroup rgroup "
    "lmoustache rmoustache Arrowvert arrowvert bracevert"
)
_FUNCTIONS = (
    "arccos arcsin arctan arg cos cosh cot coth csc deg det dim exp gcd hom inf ker lg lim "
    "liminf limsup ln log max min Pr sec sin sinh sup tan tanh injlim projlim varinjlim "
    "varliminf varlimsup varprojlim operatorname DeclareMathOperator bmod pmod pod mod"
)
_STRUCTURE = (
    "frac dfrac tfrac cfrac genfrac over atop above choose brace brack binom dbinom tbinom sqrt "
    "root of overline underline overbrace underbrace overleftarrow overrightarrow "
    "overleftrightarrow underleftarrow underrightarrow underleftrightarrow widehat widetilde "
    "hat tilde bar vec dot ddot dddot ddddot acute grave breve check mathring overset underset "
    "stackrel atop limits nolimits displaylimits displaystyle textstyle scriptstyle "
    "scriptscriptstyle begin end substack sideset phantom hphantom vphantom smash mathstrut "
    "strut quad qquad enspace thinspace negthinspace medspace negmedspace thickspace "
    "negthickspace hspace kern mkern mskip hskip space nobreakspace hfill hfil cr newline "
    "hline hdashline cline tag notag nonumber label eqref ref displaybreak allowbreak "
    "boxed fbox framebox cancel bcancel xcancel cancelto not mathop mathbin mathrel mathopen "
    "mathclose mathpunct mathord mathinner underbar overparen underparen overbracket "
    "underbracket nonscript shoveleft shoveright intertext lower raise llap rlap mathllap "
    "mathrlap mathclap clap"
)
_FONTS = (
    "mathrm mathit mathbf mathsf mathtt mathcal mathscr mathbb mathfrak mathnormal boldsymbol "
    "bm pmb bf rm it sf tt cal frak Bbb bold mit oldstyle scr text textrm textit textbf textsf "
    "texttt textnormal textup textmd emph mbox hbox vbox tiny scriptsize footnotesize small "
    "normalsize large Large LARGE huge Huge operatorname"
)
# The tables of text/latex outputs (statsmodels' summaries: tabular with booktabs' rules). MathJax
# draws none of them (an undefined command shows as an error in the math, or nbconvert's LaTeX
# typesets them): rules, spans, captions and vertical space (Summary2 ends with \bigskip), which
# can carry no style, attribute or link.
_TABLES = (
    "toprule midrule bottomrule cmidrule addlinespace multicolumn multirow caption centering "
    "bigskip medskip smallskip"
)
_COLOR = "color textcolor colorbox fcolorbox"
"""Colour macros: allowed, with their arguments checked (see ``_COLOR_ARGUMENT``)."""

_GROUPS = (_GREEK, _SYMBOLS, _OPERATORS, _RELATIONS, _ARROWS, _DELIMITERS, _FUNCTIONS)
ALLOWED: frozenset[str] = frozenset(
    " ".join((*_GROUPS, _STRUCTURE, _FONTS, _TABLES, _COLOR)).split()
)
"""The control sequences (made of letters) that may reach MathJax."""

_CONTROL = re.compile(r"\\(?:([A-Za-z]+)|.)", re.DOTALL)
"""A control word (its name: group 1) or a control symbol (``\\\\``, ``\\,``, ``\\{``), read left
to right as TeX does: in ``\\\\m_{21}`` (a matrix's line break) there is no ``\\m``."""
_MATH_DELIMITER = re.compile(r"\$|\\\(|\\\[|\\begin\b|\\ensuremath\b")
_COLOR_USE = re.compile(
    r"\\(color|textcolor|colorbox|fcolorbox)\s*((?:\s*(?:\[[^\]]*\]|\{[^}]*\}))+)"
)
_COLOR_ARGUMENT = re.compile(r"[A-Za-z0-9#.,\s-]*")
_URL = re.compile(r"url\s*\(")
# Browsers drop ASCII tab and newline anywhere in a URL and C0 controls around it; CSS drops
# comments and takes escapes: url may be spelt u\rl or u/**/rl as well.
_NOISE = re.compile(r"[\x00-\x20\\]+|/\*.*?\*/", re.DOTALL)


def refusal(source: str) -> str | None:
    """Why ``source`` (a text/latex, Markdown or HTML value) may not reach MathJax, or None."""
    decoded = source
    for _ in range(3):  # entities decode in Markdown, and again in the HTML it makes
        decoded = html.unescape(decoded)
    if not _MATH_DELIMITER.search(decoded):
        return None  # (no math for MathJax to typeset)
    if _URL.search(_NOISE.sub("", decoded).lower()):
        return "it holds a CSS url(), which the browser would fetch"
    for match in _CONTROL.finditer(decoded):
        if match.group(1) is not None and match.group(1) not in ALLOWED:
            return f"its TeX uses \\{match.group(1)}, which MathJax could turn into styles or links"
    for match in _COLOR_USE.finditer(decoded):
        models = re.findall(r"\[([^\]]*)\]", match.group(2))
        colours = re.findall(r"\{([^}]*)\}", match.group(2))[
            : 2 if match.group(1) == "fcolorbox" else 1
        ]
        if not all(_COLOR_ARGUMENT.fullmatch(value) for value in (*models, *colours)):
            return "its TeX gives a colour that is not a plain name or number"
    return None
