/*
 * curves.c - SAVE_DIR/curves.svg: the train cost (every log period) and the
 * test cost and metrics (every pass) against the step, drawn as plain SVG
 * (axes with ticks, a grid, a legend) that any browser or renderer shows.
 */
#include "curves.h"
#include "../core/fs.h"
#include "../core/pd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WIDTH 860
#define LEFT 84             /* room for the y tick labels and the axis name */
#define RIGHT 24
#define TOP 54
#define COST_H 300
#define METRIC_H 190
#define GAP 76              /* between panels: the x labels of the one above */
#define BOTTOM 56
#define MAX_POINTS 1500     /* a longer series is averaged down to this */
#define SMOOTH_POINTS 150   /* the train cost's mean line: this many points */
#define TRAIN_COLOR "#1f77b4"
#define TEST_COLOR "#d62728"

static const char *const palette[] = {"#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

void pd_curves_init(pd_curves *c, const pd_recipe *r)
{
    memset(c, 0, sizeof *c);
    c->r = r;
    c->nm = r->nmetrics;
}

void pd_curves_free(pd_curves *c)
{
    free(c->train);
    free(c->test);
    memset(c, 0, sizeof *c);
}

void pd_curves_train(pd_curves *c, long step, double cost)
{
    if (!isfinite(cost)) return;
    PD_GROW(&c->train, &c->cap_train, 2 * (c->ntrain + 1));
    c->train[2 * c->ntrain] = (double)step;
    c->train[2 * c->ntrain + 1] = cost;
    c->ntrain++;
}

void pd_curves_test(pd_curves *c, long step, int pass, double cost, const double *metrics)
{
    int w = 3 + c->nm;
    PD_GROW(&c->test, &c->cap_test, w * (c->ntest + 1));
    double *row = c->test + (size_t)w * c->ntest;
    row[0] = (double)step;
    row[1] = pass;
    row[2] = cost;
    for (int i = 0; i < c->nm; i++) row[3 + i] = metrics ? metrics[i] : NAN;
    c->ntest++;
}

/* --- drawing ------------------------------------------------------------------- */

typedef struct panel {
    double x, y, w, h;      /* the plot area in pixels */
    double x0, x1, y0, y1;  /* the data range shown */
    int logy;
} panel;

static double px(const panel *p, double x)
{
    return p->x + (x - p->x0) / (p->x1 - p->x0) * p->w;
}

static double py(const panel *p, double y)
{
    double t = p->logy ? (log10(y) - log10(p->y0)) / (log10(p->y1) - log10(p->y0)) : (y - p->y0) / (p->y1 - p->y0);
    return p->y + p->h - t * p->h;
}

/* A tick step of 1, 2 or 5 times a power of ten giving about n ticks over span. */
static double nice_step(double span, int n)
{
    double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void fmt_num(char *buf, size_t len, double v)
{
    if (fabs(v) >= 1e5 && fabs(v) < 1e9 && v == floor(v)) snprintf(buf, len, "%.0fk", v / 1000);
    else snprintf(buf, len, "%g", fabs(v) < 1e-12 ? 0.0 : v);
}

/* Set the y range to hold [lo, hi]: a log scale when every value is
 * positive and the largest is 20 times the smallest, else linear with a margin. */
static void y_range(panel *p, double lo, double hi, int allow_log)
{
    if (!(lo <= hi)) lo = 0, hi = 1;
    p->logy = allow_log && lo > 0 && hi / lo >= 20;
    if (p->logy) {
        p->y0 = pow(10, floor(log10(lo) * 4) / 4);
        p->y1 = pow(10, ceil(log10(hi) * 4) / 4);
        return;
    }
    double pad = hi > lo ? (hi - lo) * 0.06 : PD_MAX(fabs(hi) * 0.1, 1e-3);
    p->y0 = lo - pad;
    p->y1 = hi + pad;
    if (lo >= 0 && p->y0 < 0) p->y0 = 0;
}

static void draw_frame(FILE *f, const panel *p, const char *ylabel)
{
    /* x grid and ticks */
    double st = nice_step(p->x1 - p->x0, 8);
    for (double x = ceil(p->x0 / st) * st; x <= p->x1 + st * 1e-9; x += st) {
        char t[32];
        fmt_num(t, sizeof t, x);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", px(p, x), p->y, px(p, x),
                p->y + p->h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n", px(p, x),
                p->y + p->h + 17, t);
    }
    /* y grid and ticks: 1, 2, 5 per decade on a log scale (decades only when many) */
    if (p->logy) {
        int decades = (int)ceil(log10(p->y1) - log10(p->y0));
        for (double d = pow(10, floor(log10(p->y0))); d <= p->y1; d *= 10)
            for (int k = 0; k < 3; k++) {
                double y = d * (k == 0 ? 1 : k == 1 ? 2 : 5);
                if (y < p->y0 * 0.999 || y > p->y1 * 1.001 || (decades > 4 && k)) continue;
                char t[32];
                fmt_num(t, sizeof t, y);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", p->x, py(p, y),
                        p->x + p->w, py(p, y));
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", p->x - 7,
                        py(p, y) + 4, t);
            }
    } else {
        double sy = nice_step(p->y1 - p->y0, 6);
        for (double y = ceil(p->y0 / sy) * sy; y <= p->y1 + sy * 1e-9; y += sy) {
            char t[32];
            fmt_num(t, sizeof t, y);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", p->x, py(p, y),
                    p->x + p->w, py(p, y));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", p->x - 7,
                    py(p, y) + 4, t);
        }
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", p->x, p->y,
            p->w, p->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"middle\">step</text>\n", p->x + p->w / 2,
            p->y + p->h + 38);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">"
               "%s%s</text>\n", p->x - 62, p->y + p->h / 2, p->x - 62, p->y + p->h / 2, ylabel,
            p->logy ? " (log scale)" : "");
}

typedef struct style {
    const char *color;
    double width, opacity;
    int markers;            /* a dot on every point */
    int points;             /* at most this many: neighbours averaged */
} style;

/* A polyline through n points (x at xy[i*stride], y at xy[i*stride+yoff]),
 * NaN or out-of-scale values skipped. */
static void draw_series(FILE *f, const panel *p, const double *xy, int n, int stride, int yoff, style st)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\" "
               "stroke-linejoin=\"round\" points=\"", st.color, st.width, st.opacity);
    int avg = n > st.points ? (n + st.points - 1) / st.points : 1;
    for (int i = 0; i < n; i += avg) {
        double sx = 0, sy = 0;
        int k = 0;
        for (int j = i; j < n && j < i + avg; j++) {
            double y = xy[(size_t)j * stride + yoff];
            if (!isfinite(y) || (p->logy && y <= 0)) continue;
            sx += xy[(size_t)j * stride];
            sy += y;
            k++;
        }
        if (k) fprintf(f, "%.1f,%.1f ", px(p, sx / k), py(p, sy / k));
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; st.markers && i < n; i++) {
        double y = xy[(size_t)i * stride + yoff];
        if (isfinite(y) && !(p->logy && y <= 0))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(p, xy[(size_t)i * stride]),
                    py(p, y), st.color);
    }
}

static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* The legend in the right corner of p where the curves end (bottom when
 * last_y, the last value drawn, is in the upper half): n entries of
 * colors[i], names[i]. */
static void draw_legend(FILE *f, const panel *p, double last_y, int n, const char *const *colors,
                        const char *const *names)
{
    size_t longest = 0;
    for (int i = 0; i < n; i++) longest = PD_MAX(longest, strlen(names[i]));
    int bottom = isfinite(last_y) && py(p, last_y) < p->y + p->h / 2;
    double w = 44 + 7.0 * (double)longest, x = p->x + p->w - w - 10;
    double y = bottom ? p->y + p->h - 20 - 20 * n : p->y + 10;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" class=\"legend\"/>\n", x, y, w, 10 + 20 * n);
    for (int i = 0; i < n; i++) {
        double ly = y + 17 + 20 * i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", x + 8,
                ly, x + 30, ly, colors[i]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">", x + 36, ly + 4);
        put_escaped(f, names[i]);
        fprintf(f, "</text>\n");
    }
}

/* Smallest and largest finite value of column yoff of n rows. */
static void span(const double *xy, int n, int stride, int yoff, double *lo, double *hi)
{
    for (int i = 0; i < n; i++) {
        double y = xy[(size_t)i * stride + yoff];
        if (!isfinite(y)) continue;
        *lo = PD_MIN(*lo, y);
        *hi = PD_MAX(*hi, y);
    }
}

static void draw_title(FILE *f, const pd_curves *c)
{
    const char *name = strrchr(c->r->path, '/') ? strrchr(c->r->path, '/') + 1 : c->r->path;
    fprintf(f, "<text x=\"%d\" y=\"30\" class=\"title\">", LEFT);
    put_escaped(f, name);
    if (c->ntest) {
        const double *last = c->test + (size_t)(c->ntest - 1) * (3 + c->nm);
        fprintf(f, ": pass %.0f, step %.0f", last[1], last[0]);
        if (isfinite(last[2])) fprintf(f, ", test cost %.5g", last[2]);
        for (int i = 0; i < c->nm && i < 3; i++) {
            fprintf(f, ", ");
            put_escaped(f, c->r->metrics[i].name);
            fprintf(f, " %.4g", last[3 + i]);
        }
    }
    fprintf(f, "</text>\n");
}

/* The cost panel, then (with metrics) the metric panel under it. */
static void draw_panels(FILE *f, const pd_curves *c, double xmax, int metrics)
{
    int w = 3 + c->nm;
    panel p = {.x = LEFT, .y = TOP, .w = WIDTH - LEFT - RIGHT, .h = COST_H, .x0 = 0, .x1 = xmax};
    double lo = INFINITY, hi = -INFINITY;
    span(c->train, c->ntrain, 2, 1, &lo, &hi);
    span(c->test, c->ntest, w, 2, &lo, &hi);
    y_range(&p, lo, hi, 1);
    draw_frame(f, &p, "cost");
    char train_name[64];
    snprintf(train_name, sizeof train_name, "train cost (every %d batches)", c->r->log_period);
    const char *colors[2] = {TRAIN_COLOR, TEST_COLOR}, *names[2] = {train_name, "test cost (every pass)"};
    int has_test = 0;
    for (int i = 0; i < c->ntest; i++) has_test |= isfinite(c->test[(size_t)i * w + 2]);
    /* the train cost's periods as a light band, their running mean over it */
    int smooth = c->ntrain > 2 * SMOOTH_POINTS;
    style band = {TRAIN_COLOR, smooth ? 1.2 : 1.6, smooth ? 0.3 : 1, 0, MAX_POINTS};
    draw_series(f, &p, c->train, c->ntrain, 2, 1, band);
    if (smooth) draw_series(f, &p, c->train, c->ntrain, 2, 1, (style){TRAIN_COLOR, 2.2, 1, 0, SMOOTH_POINTS});
    if (has_test)
        draw_series(f, &p, c->test, c->ntest, w, 2, (style){TEST_COLOR, 2.2, 1, c->ntest <= 40, MAX_POINTS});
    draw_legend(f, &p, c->ntrain ? c->train[2 * c->ntrain - 1] : NAN, 1 + has_test, colors, names);
    if (!metrics) return;
    panel q = p;
    q.y = TOP + COST_H + GAP;
    q.h = METRIC_H;
    lo = INFINITY, hi = -INFINITY;
    for (int m = 0; m < c->nm; m++) span(c->test, c->ntest, w, 3 + m, &lo, &hi);
    y_range(&q, lo, hi, 0);
    draw_frame(f, &q, "test metric");
    const char *mc[PD_COUNT(palette)], *mn[PD_COUNT(palette)];
    int n = 0;
    for (int m = 0; m < c->nm && n < (int)PD_COUNT(palette); m++, n++) {
        mc[n] = palette[n];
        mn[n] = c->r->metrics[m].name;
        draw_series(f, &q, c->test, c->ntest, w, 3 + m, (style){palette[n], 2.2, 1, c->ntest <= 40, MAX_POINTS});
    }
    draw_legend(f, &q, c->ntest ? c->test[(size_t)(c->ntest - 1) * w + 3] : NAN, n, mc, mn);
}

/* The points, one a line: "train STEP COST" and "test STEP PASS COST METRIC...". */
static void write_points(FILE *f, const pd_curves *c)
{
    int w = 3 + c->nm;
    for (int i = 0; i < c->ntrain; i++) fprintf(f, "train %.0f %.9g\n", c->train[2 * i], c->train[2 * i + 1]);
    for (int i = 0; i < c->ntest; i++) {
        const double *row = c->test + (size_t)i * w;
        fprintf(f, "test %.0f %.0f", row[0], row[1]);
        for (int k = 2; k < w; k++) fprintf(f, " %.9g", row[k]);
        fprintf(f, "\n");
    }
}

void pd_curves_load(pd_curves *c, const char *dir, long max_step)
{
    char *path = pd_xasprintf("%s/curves.tsv", dir), line[1024];
    FILE *f = fopen(path, "r");
    free(path);
    if (!f) return;
    double *m = pd_xcalloc((size_t)c->nm + 1, sizeof *m);
    while (fgets(line, sizeof line, f)) {
        long step;
        int pass, used;
        double cost;
        if (sscanf(line, "train %ld %lf", &step, &cost) == 2 && step <= max_step) {
            pd_curves_train(c, step, cost);
        } else if (sscanf(line, "test %ld %d %lf%n", &step, &pass, &cost, &used) == 3 && step <= max_step) {
            const char *p = line + used;
            for (int i = 0; i < c->nm; i++) {
                char *end;
                m[i] = strtod(p, &end);
                if (end == p) m[i] = NAN;
                p = end;
            }
            pd_curves_test(c, step, pass, cost, m);
        }
    }
    free(m);
    fclose(f);
}

/* Write path with fn: whole or not at all. */
static int write_atomic(const pd_curves *c, const char *path, void (*fn)(FILE *, const pd_curves *))
{
    pd_out o;
    int rc = pd_out_open(&o, path);
    if (rc < 0) return rc;
    fn(o.f, c);
    return pd_out_close(&o, 1);
}

static void write_svg(FILE *f, const pd_curves *c)
{
    int w = 3 + c->nm, metrics = 0;
    double xmax = 1;
    for (int i = 0; i < c->ntrain; i++) xmax = PD_MAX(xmax, c->train[2 * i]);
    for (int i = 0; i < c->ntest; i++) {
        xmax = PD_MAX(xmax, c->test[(size_t)i * w]);
        for (int m = 0; m < c->nm; m++) metrics |= isfinite(c->test[(size_t)i * w + 3 + m]);
    }
    int height = TOP + COST_H + BOTTOM + (metrics ? GAP + METRIC_H - 10 : 0);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n"
               "<style>\n"
               "text { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; fill: #222; }\n"
               ".tick { font-size: 12px; } .label { font-size: 13px; }\n"
               ".title { font-size: 15px; font-weight: bold; }\n"
               ".grid { stroke: #e6e6e6; stroke-width: 1; } .frame { fill: none; stroke: #555; stroke-width: 1; }\n"
               ".legend { fill: #ffffff; fill-opacity: 0.9; stroke: #bbbbbb; }\n"
               "</style>\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
            WIDTH, height, WIDTH, height);
    draw_title(f, c);
    draw_panels(f, c, xmax, metrics);
    fprintf(f, "</svg>\n");
}

int pd_curves_write(const pd_curves *c, const char *dir)
{
    char *svg = pd_xasprintf("%s/curves.svg", dir), *tsv = pd_xasprintf("%s/curves.tsv", dir);
    int rc = write_atomic(c, tsv, write_points);
    if (rc == 0) rc = write_atomic(c, svg, write_svg);
    free(svg);
    free(tsv);
    return rc;
}
