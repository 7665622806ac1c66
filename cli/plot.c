/* plot.c - heatmaps drawn with Cairo for the nnt command's --plot (plot.h). Without Cairo
 * (NNT_HAVE_CAIRO undefined) the layout functions still work and plot_write reports that the
 * build has no Cairo. */
#include "plot.h"

#include "nnt/nnt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef NNT_HAVE_CAIRO
#include <cairo.h>
#include <cairo-svg.h>
#endif

int plot_format(const char *file)
{
    size_t n = file ? strlen(file) : 0;
    if (n > 4 && strcmp(file + n - 4, ".png") == 0) return 0;
    if (n > 4 && strcmp(file + n - 4, ".svg") == 0) return 1;
    return -1;
}

static int grid_cols(const plot_grid *g)
{
    int pc = g->panel_cols < 1 ? 1 : g->panel_cols;
    return pc < g->panels ? pc : (g->panels < 1 ? 1 : g->panels);
}

static int panel_w(const plot_grid *g) { return PLOT_ROW_LABEL_W + g->cols * g->cell_w; }
static int panel_h(const plot_grid *g) { return PLOT_PANEL_TITLE_H + PLOT_COL_LABEL_H + g->rows * g->cell_h; }

void plot_size(const plot_grid *g, int *width, int *height)
{
    int pc = grid_cols(g), lines = (g->panels + pc - 1) / pc;
    if (lines < 1) lines = 1;
    *width = 2 * PLOT_MARGIN + pc * panel_w(g) + (pc - 1) * PLOT_GAP + PLOT_BAR_W;
    *height = 2 * PLOT_MARGIN + PLOT_TITLE_H + lines * panel_h(g) + (lines - 1) * PLOT_GAP;
}

plot_rect plot_cell(const plot_grid *g, int p, int r, int c)
{
    int pc = grid_cols(g);
    int px = PLOT_MARGIN + (p % pc) * (panel_w(g) + PLOT_GAP);
    int py = PLOT_MARGIN + PLOT_TITLE_H + (p / pc) * (panel_h(g) + PLOT_GAP);
    return (plot_rect){px + PLOT_ROW_LABEL_W + c * g->cell_w, py + PLOT_PANEL_TITLE_H + PLOT_COL_LABEL_H + r * g->cell_h,
                       g->cell_w, g->cell_h};
}

/* Anchors of the colormap, evenly spaced over [0, 1]: sampled from matplotlib's viridis
 * (dark violet, blue, teal, green, yellow) and interpolated linearly between. */
static const uint8_t ANCHORS[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};

void plot_colour(double t, uint8_t rgb[3])
{
    if (isnan(t)) {
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double x = t * 4;
    int i = (int)x;
    if (i >= 4) i = 3;
    double f = x - i;
    for (int k = 0; k < 3; k++) rgb[k] = (uint8_t)lround(ANCHORS[i][k] + f * (ANCHORS[i + 1][k] - ANCHORS[i][k]));
}

void plot_value_colour(const plot_grid *g, double v, uint8_t rgb[3])
{
    double w = g->vmax - g->vmin;
    plot_colour(isnan(v) ? v : w > 0 ? (v - g->vmin) / w : 1.0, rgb);
}

#ifdef NNT_HAVE_CAIRO

static void set_rgb(cairo_t *cr, const uint8_t rgb[3]) { cairo_set_source_rgb(cr, rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0); }

/* Shows text within max_w points: shortened with "..." when wider. */
static void fit_text(cairo_t *cr, const char *text, double max_w, char *buf, size_t n)
{
    snprintf(buf, n, "%s", text);
    cairo_text_extents_t e;
    cairo_text_extents(cr, buf, &e);
    size_t len = strlen(buf);
    while (e.x_advance > max_w && len > 1) {
        len--;
        while (len > 1 && ((unsigned char)buf[len] & 0xc0) == 0x80) len--; /* whole UTF-8 characters */
        if (len + 4 > n) break;
        memcpy(buf + len, "...", 4);
        cairo_text_extents(cr, buf, &e);
    }
}

/* Panel p's title, axis names and row and column labels. */
static void draw_labels(cairo_t *cr, const plot_grid *g, int p)
{
    char buf[256];
    plot_rect o = plot_cell(g, p, 0, 0);
    int px = o.x - PLOT_ROW_LABEL_W, py = o.y - PLOT_COL_LABEL_H - PLOT_PANEL_TITLE_H;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 12);
    if (g->panel_titles && g->panel_titles[p]) {
        fit_text(cr, g->panel_titles[p], panel_w(g), buf, sizeof buf);
        cairo_move_to(cr, px, py + 13);
        cairo_show_text(cr, buf);
    }
    cairo_set_font_size(cr, 10);
    /* axis names in the corner left of the column labels */
    if (g->col_axis) {
        fit_text(cr, g->col_axis, PLOT_ROW_LABEL_W - 4, buf, sizeof buf);
        cairo_move_to(cr, px, o.y - 16);
        cairo_show_text(cr, buf);
    }
    if (g->row_axis) {
        fit_text(cr, g->row_axis, PLOT_ROW_LABEL_W - 4, buf, sizeof buf);
        cairo_move_to(cr, px, o.y - 4);
        cairo_show_text(cr, buf);
    }
    for (int r = 0; g->row_labels && r < g->rows; r++) {
        plot_rect c = plot_cell(g, p, r, 0);
        fit_text(cr, g->row_labels[r] ? g->row_labels[r] : "", PLOT_ROW_LABEL_W - 6, buf, sizeof buf);
        cairo_text_extents_t e;
        cairo_text_extents(cr, buf, &e);
        cairo_move_to(cr, c.x - 4 - e.x_advance, c.y + c.h / 2.0 + 4);
        cairo_show_text(cr, buf);
    }
    for (int k = 0; g->col_labels && k < g->cols; k++) {
        plot_rect c = plot_cell(g, p, 0, k);
        const char *lab = g->col_labels[g->col_labels_per_panel ? (size_t)p * g->cols + k : (size_t)k];
        fit_text(cr, lab ? lab : "", PLOT_COL_LABEL_H * 1.3, buf, sizeof buf);
        cairo_save(cr);
        cairo_move_to(cr, c.x + c.w / 2.0 - 3, c.y - 4);
        cairo_rotate(cr, -M_PI / 4);
        cairo_show_text(cr, buf);
        cairo_restore(cr);
    }
}

/* Panel p's cells, each filled with its value's colour, with its text. */
static void draw_cells(cairo_t *cr, const plot_grid *g, int p)
{
    char buf[256];
    for (int r = 0; r < g->rows; r++)
        for (int k = 0; k < g->cols; k++) {
            size_t i = ((size_t)p * g->rows + r) * g->cols + k;
            plot_rect c = plot_cell(g, p, r, k);
            uint8_t rgb[3];
            plot_value_colour(g, g->values[i], rgb);
            set_rgb(cr, rgb);
            cairo_rectangle(cr, c.x, c.y, c.w, c.h);
            cairo_fill(cr);
            if (!g->cell_text || !g->cell_text[i]) continue;
            /* dark text on light cells, white on dark ones (Rec. 601 luma) */
            double luma = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 255.0;
            double ink = luma > 0.5 ? 0 : 1;
            cairo_set_source_rgb(cr, ink, ink, ink);
            fit_text(cr, g->cell_text[i], c.w - 4, buf, sizeof buf);
            cairo_text_extents_t e;
            cairo_text_extents(cr, buf, &e);
            /* kept off the cell's edges, whose pixels show the fill colour alone */
            cairo_move_to(cr, c.x + (c.w - e.x_advance) / 2.0, c.y + c.h / 2.0 + 3);
            cairo_show_text(cr, buf);
        }
}

/* The colour bar: 100 steps from vmin (bottom) to vmax (top), with both numbers. */
static void draw_bar(cairo_t *cr, const plot_grid *g, int W, int H)
{
    char buf[64];
    int bx = W - PLOT_MARGIN - PLOT_BAR_W + 14, by = PLOT_MARGIN + PLOT_TITLE_H + PLOT_PANEL_TITLE_H + PLOT_COL_LABEL_H;
    double bh = H - PLOT_MARGIN - by;
    if (bh > 200) bh = 200;
    for (int s = 0; s < 100; s++) {
        uint8_t rgb[3];
        plot_colour((s + 0.5) / 100.0, rgb);
        set_rgb(cr, rgb);
        cairo_rectangle(cr, bx, by + bh * (99 - s) / 100.0, 14, bh / 100.0 + 0.5);
        cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 9);
    snprintf(buf, sizeof buf, "%.3g", g->vmax);
    cairo_move_to(cr, bx - 12, by - 4);
    cairo_show_text(cr, buf);
    snprintf(buf, sizeof buf, "%.3g", g->vmin);
    cairo_move_to(cr, bx - 12, by + bh + 11);
    cairo_show_text(cr, buf);
}

static void draw(cairo_t *cr, const plot_grid *g, int W, int H)
{
    char buf[256];
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 14);
    cairo_set_source_rgb(cr, 0, 0, 0);
    fit_text(cr, g->title ? g->title : "", W - 2 * PLOT_MARGIN, buf, sizeof buf);
    cairo_move_to(cr, PLOT_MARGIN, PLOT_MARGIN + 16);
    cairo_show_text(cr, buf);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int p = 0; p < g->panels; p++) {
        draw_labels(cr, g, p);
        draw_cells(cr, g, p);
    }
    draw_bar(cr, g, W, H);
}

/* The picture's bytes, gathered in memory by cairo's stream writers. */
typedef struct plot_bytes {
    unsigned char *p;
    size_t n, cap;
    int failed;
} plot_bytes;

static cairo_status_t gather(void *closure, const unsigned char *data, unsigned int len)
{
    plot_bytes *b = closure;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + len) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return CAIRO_STATUS_WRITE_ERROR;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return CAIRO_STATUS_SUCCESS;
}

int plot_write(const char *file, const plot_grid *g, char *err, size_t n)
{
    int fmt = plot_format(file);
    if (fmt < 0) {
        snprintf(err, n, "--plot %s: expected a file name ending in .png or .svg", file);
        return -1;
    }
    int W, H;
    plot_size(g, &W, &H);
    if (W > 30000 || H > 30000) {
        snprintf(err, n, "--plot %s: the picture would be %d x %d pixels (at most 30000 a side): choose fewer "
                 "positions or blocks", file, W, H);
        return -1;
    }
    /* drawn into memory, then put in place whole by libnnt (an interrupted run leaves no file) */
    plot_bytes bytes = {0};
    cairo_surface_t *s = fmt == 0 ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H)
                                  : cairo_svg_surface_create_for_stream(gather, &bytes, W, H);
    cairo_t *cr = cairo_create(s);
    draw(cr, g, W, H);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st == CAIRO_STATUS_SUCCESS && fmt == 0) st = cairo_surface_write_to_png_stream(s, gather, &bytes);
    cairo_surface_finish(s);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(s);
    cairo_surface_destroy(s);
    int rc = 0;
    nnt_error e = {0};
    if (st != CAIRO_STATUS_SUCCESS || bytes.failed) {
        snprintf(err, n, "--plot %s: cannot draw it: %s", file,
                 bytes.failed ? "out of memory" : cairo_status_to_string(st));
        rc = -1;
    } else if (nnt_write_file(file, bytes.p, bytes.n, &e) != NNT_OK) {
        snprintf(err, n, "--plot %s", e.msg);
        rc = -1;
    }
    free(bytes.p);
    return rc;
}

#else

int plot_write(const char *file, const plot_grid *g, char *err, size_t n)
{
    (void)g;
    snprintf(err, n, "--plot %s: this nnt was built without Cairo, which draws the pictures (Debian package "
             "libcairo2-dev, installed by scripts/install-deps.sh; then configure the build again)", file);
    return -1;
}

#endif
