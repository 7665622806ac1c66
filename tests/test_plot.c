/* test_plot.c - the pictures of --plot (cli/plot.c), read back with Cairo's PNG reader: the
 * layout's size, and the colour of cells whose value is known - the scale's ends take
 * matplotlib's viridis end colours (#440154 at the minimum, #fde725 at the maximum), a missing
 * value is grey; then the nnt command's pictures of the embedded tiny MiniMax-M2 (lens, patch,
 * attention and routing), checked against the values the same runs write with --out. */
#include <cairo.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plot.h"
#include "test_util.h"

static const uint8_t VIRIDIS_MIN[3] = {0x44, 0x01, 0x54}, VIRIDIS_MAX[3] = {0xfd, 0xe7, 0x25};

typedef struct png {
    cairo_surface_t *s;
    int w, h, stride;
    const unsigned char *data;
} png;

static int png_read(const char *file, png *p)
{
    p->s = cairo_image_surface_create_from_png(file);
    if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "cannot read %s: %s\n", file, cairo_status_to_string(cairo_surface_status(p->s)));
        cairo_surface_destroy(p->s);
        return -1;
    }
    cairo_surface_flush(p->s);
    p->w = cairo_image_surface_get_width(p->s);
    p->h = cairo_image_surface_get_height(p->s);
    p->stride = cairo_image_surface_get_stride(p->s);
    p->data = cairo_image_surface_get_data(p->s);
    return 0;
}

/* The colour at (x, y) (opaque pictures: premultiplied equals plain). */
static void png_rgb(const png *p, int x, int y, uint8_t rgb[3])
{
    uint32_t v = *(const uint32_t *)(p->data + (size_t)y * p->stride + (size_t)x * 4);
    rgb[0] = (v >> 16) & 255;
    rgb[1] = (v >> 8) & 255;
    rgb[2] = v & 255;
}

/* Whether the cell's corner pixels (inside by 1, away from its text) have colour want. */
static int cell_is(const png *p, const plot_grid *g, int panel, int r, int c, const uint8_t want[3])
{
    plot_rect rc = plot_cell(g, panel, r, c);
    int xs[2] = {rc.x + 1, rc.x + rc.w - 2}, ys[2] = {rc.y + 1, rc.y + rc.h - 2};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            uint8_t got[3];
            png_rgb(p, xs[i], ys[j], got);
            if (memcmp(got, want, 3) != 0) {
                fprintf(stderr, "panel %d cell (%d, %d) at (%d, %d): got %d %d %d, expected %d %d %d\n", panel, r, c,
                        xs[i], ys[j], got[0], got[1], got[2], want[0], want[1], want[2]);
                return 0;
            }
        }
    return 1;
}

static void test_colormap_ends(void)
{
    uint8_t c[3];
    plot_colour(0, c);
    CU_ASSERT_EQUAL(memcmp(c, VIRIDIS_MIN, 3), 0);
    plot_colour(1, c);
    CU_ASSERT_EQUAL(memcmp(c, VIRIDIS_MAX, 3), 0);
    plot_colour(-3, c); /* clamped */
    CU_ASSERT_EQUAL(memcmp(c, VIRIDIS_MIN, 3), 0);
    plot_colour(NAN, c);
    CU_ASSERT(c[0] == 128 && c[1] == 128 && c[2] == 128);
    CU_ASSERT_EQUAL(plot_format("a.png"), 0);
    CU_ASSERT_EQUAL(plot_format("a.svg"), 1);
    CU_ASSERT_EQUAL(plot_format("a.jpg"), -1);
    CU_ASSERT_EQUAL(plot_format(".png"), -1);
}

/* A hand-made grid: two panels of 3 x 4 cells with values -2 .. 9.5, one in the middle of the
 * scale and one missing. */
static void test_grid_png(void)
{
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = -2 + 0.5 * i;
    v[5] = NAN;
    v[11] = 3.75; /* half way up the scale */
    const char *rows[3] = {"a", "b", "c"}, *cols[4] = {"w", "x", "y", "z"}, *titles[2] = {"one", "two"};
    const char *text[24] = {0};
    text[23] = "max";
    text[0] = "min";
    plot_grid g = {.title = "test", .panels = 2, .panel_cols = 2, .panel_titles = titles, .rows = 3, .cols = 4,
                   .values = v, .cell_text = text, .row_labels = rows, .col_labels = cols, .row_axis = "r",
                   .col_axis = "c", .vmin = -2, .vmax = 9.5, .cell_w = 40, .cell_h = 20};
    char file[512], err[512];
    snprintf(file, sizeof file, "%s/plot_grid.png", t_tmpdir());
    CU_ASSERT_EQUAL_FATAL(plot_write(file, &g, err, sizeof err), 0);
    png p;
    CU_ASSERT_EQUAL_FATAL(png_read(file, &p), 0);
    /* the documented layout: 2 panels side by side, each 110 + 4 * 40 wide and 18 + 80 + 3 * 20 high */
    CU_ASSERT_EQUAL(p.w, 2 * 12 + 2 * (110 + 160) + 16 + 70);
    CU_ASSERT_EQUAL(p.h, 2 * 12 + 28 + (18 + 80 + 60));
    int W, H;
    plot_size(&g, &W, &H);
    CU_ASSERT(p.w == W && p.h == H);
    CU_ASSERT(cell_is(&p, &g, 0, 0, 0, VIRIDIS_MIN));
    CU_ASSERT(cell_is(&p, &g, 1, 2, 3, VIRIDIS_MAX));
    uint8_t grey[3] = {128, 128, 128}, mid[3];
    CU_ASSERT(cell_is(&p, &g, 0, 1, 1, grey));
    /* value 3.75, half way: between the anchors at 0.5 exactly (#21918c) */
    plot_value_colour(&g, v[11], mid);
    CU_ASSERT(mid[0] == 0x21 && mid[1] == 0x91 && mid[2] == 0x8c);
    CU_ASSERT(cell_is(&p, &g, 0, 2, 3, mid));
    cairo_surface_destroy(p.s);
    /* an SVG of the same grid, and the refusals */
    snprintf(file, sizeof file, "%s/plot_grid.svg", t_tmpdir());
    CU_ASSERT_EQUAL(plot_write(file, &g, err, sizeof err), 0);
    FILE *f = fopen(file, "r");
    char head[256] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT(fread(head, 1, sizeof head - 1, f) > 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(head, "<svg"));
    CU_ASSERT_NOT_EQUAL(plot_write("x.gif", &g, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "--plot x.gif: expected a file name ending in .png or .svg");
    snprintf(file, sizeof file, "%s/no-such-dir/x.png", t_tmpdir());
    CU_ASSERT_NOT_EQUAL(plot_write(file, &g, err, sizeof err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no-such-dir/x.png: cannot create: No such file or directory"));
}

/* Runs the nnt command; 0 on exit status 0. */
static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "NNT_CONFIG= '%s' %s > %s/plot_cli.log 2>&1", NNT_TEST_CLI, args, t_tmpdir());
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/plot_cli.log >&2", t_tmpdir());
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    }
    return rc;
}

static const char *PROMPT = "The people of the United States";

static void test_cli_lens(void)
{
    nnt_runtime *rt = t_runtime();
    char args[2048], png_file[512], out[512];
    snprintf(png_file, sizeof png_file, "%s/lens.png", t_tmpdir());
    snprintf(out, sizeof out, "%s/lens.safetensors", t_tmpdir());
    snprintf(args, sizeof args, "lens --model '%s' --prompt '%s' --prompt 'of freedom' --plot '%s' --out '%s'",
             NNT_TEST_EXAMPLE, PROMPT, png_file, out);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    nnt_tensor probs = {0}, pos = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "lens_probs", &probs), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "lens_positions", &pos), NNT_OK);
    int B = (int)probs.shape[0], L = (int)probs.shape[1], W = (int)probs.shape[2], V = (int)probs.shape[3];
    plot_grid g = {.panels = B, .panel_cols = 1, .rows = L, .cols = W, .vmin = 0, .vmax = 1,
                   .cell_w = PLOT_TEXT_CELL_W, .cell_h = PLOT_TEXT_CELL_H};
    png p;
    CU_ASSERT_EQUAL_FATAL(png_read(png_file, &p), 0);
    int w, h;
    plot_size(&g, &w, &h);
    CU_ASSERT(p.w == w && p.h == h);
    /* each cell: the colour of its top token's probability; past a row's positions, grey */
    int checked = 0;
    for (int r = 0; r < B; r++)
        for (int l = 0; l < L; l++)
            for (int j = 0; j < W; j++) {
                uint8_t want[3];
                if (((int32_t *)pos.data)[r * W + j] < 0) {
                    want[0] = want[1] = want[2] = 128;
                } else {
                    const float *row = (const float *)probs.data + (((size_t)r * L + l) * W + j) * V;
                    float best = 0;
                    for (int v = 0; v < V; v++) best = row[v] > best ? row[v] : best;
                    plot_colour((double)best, want);
                }
                checked += cell_is(&p, &g, r, l, j, want);
            }
    CU_ASSERT_EQUAL(checked, B * L * W);
    CU_ASSERT(B == 2 && W > 2);
    cairo_surface_destroy(p.s);
    nnt_tensor_free(&probs);
    nnt_tensor_free(&pos);
    nnt_runtime_close(rt);
}

static void test_cli_patch(void)
{
    nnt_runtime *rt = t_runtime();
    char args[2048], png_file[512], out[512];
    snprintf(png_file, sizeof png_file, "%s/patch.png", t_tmpdir());
    snprintf(out, sizeof out, "%s/patch.safetensors", t_tmpdir());
    snprintf(args, sizeof args, "patch --model '%s' --clean 'The people of the nation' --corrupt 'The people of the "
             "people' --metric logit-diff:97,109 --plot '%s' --out '%s'", NNT_TEST_EXAMPLE, png_file, out);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    nnt_tensor grid = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "patch_metric", &grid), NNT_OK);
    int NB = (int)grid.shape[0], P = (int)grid.shape[1];
    const double *v = grid.data;
    double lo = INFINITY, hi = -INFINITY;
    int imax = 0, imin = 0;
    for (int i = 0; i < NB * P; i++) {
        if (v[i] > hi) hi = v[i], imax = i;
        if (v[i] < lo) lo = v[i], imin = i;
    }
    plot_grid g = {.panels = 1, .panel_cols = 1, .rows = NB, .cols = P, .vmin = lo, .vmax = hi,
                   .cell_w = PLOT_TEXT_CELL_W, .cell_h = PLOT_TEXT_CELL_H};
    png p;
    CU_ASSERT_EQUAL_FATAL(png_read(png_file, &p), 0);
    int w, h;
    plot_size(&g, &w, &h);
    CU_ASSERT(p.w == w && p.h == h);
    CU_ASSERT(NB == 3 && P == 7);
    CU_ASSERT(cell_is(&p, &g, 0, imax / P, imax % P, VIRIDIS_MAX));
    CU_ASSERT(cell_is(&p, &g, 0, imin / P, imin % P, VIRIDIS_MIN));
    for (int i = 0; i < NB * P; i++) {
        uint8_t want[3];
        plot_value_colour(&g, v[i], want);
        CU_ASSERT(cell_is(&p, &g, 0, i / P, i % P, want));
    }
    cairo_surface_destroy(p.s);
    nnt_tensor_free(&grid);
    nnt_runtime_close(rt);
}

static void test_cli_attention(void)
{
    nnt_runtime *rt = t_runtime();
    char args[2048], png_file[512], out[512];
    snprintf(png_file, sizeof png_file, "%s/attention.png", t_tmpdir());
    snprintf(out, sizeof out, "%s/attention.safetensors", t_tmpdir());
    snprintf(args, sizeof args, "trace --model '%s' --prompt '%s' --save layers.1.self_attn.attention_probabilities "
             "--plot '%s' --out '%s'", NNT_TEST_EXAMPLE, PROMPT, png_file, out);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    nnt_tensor a = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "layers.1.self_attn.attention_probabilities", &a), NNT_OK);
    int H = (int)a.shape[1], S = (int)a.shape[2], K = (int)a.shape[3];
    double hi = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(&a); i++) hi = ((float *)a.data)[i] > hi ? ((float *)a.data)[i] : hi;
    plot_grid g = {.panels = H, .panel_cols = H < 4 ? H : 4, .rows = S, .cols = K, .vmin = 0, .vmax = hi,
                   .cell_w = PLOT_CELL, .cell_h = PLOT_CELL};
    png p;
    CU_ASSERT_EQUAL_FATAL(png_read(png_file, &p), 0);
    int w, h;
    plot_size(&g, &w, &h);
    CU_ASSERT(p.w == w && p.h == h);
    /* every head's first query sees only the first key (probability 1, the maximum); the keys
     * after a query get 0, the minimum */
    for (int hd = 0; hd < H; hd++) {
        CU_ASSERT(cell_is(&p, &g, hd, 0, 0, VIRIDIS_MAX));
        CU_ASSERT(cell_is(&p, &g, hd, 0, K - 1, VIRIDIS_MIN));
        CU_ASSERT(cell_is(&p, &g, hd, 2, 3, VIRIDIS_MIN));
        uint8_t want[3];
        plot_value_colour(&g, ((float *)a.data)[(((size_t)hd * S) + 4) * K + 2], want);
        CU_ASSERT(cell_is(&p, &g, hd, 4, 2, want));
    }
    cairo_surface_destroy(p.s);
    nnt_tensor_free(&a);
    nnt_runtime_close(rt);
}

static void test_cli_routing(void)
{
    nnt_runtime *rt = t_runtime();
    char args[2048], png_file[512], out[512];
    snprintf(png_file, sizeof png_file, "%s/routing.png", t_tmpdir());
    snprintf(out, sizeof out, "%s/routing.safetensors", t_tmpdir());
    snprintf(args, sizeof args, "trace --model '%s' --prompt '%s' --save layers.0.mlp.expert_weights --plot '%s' --out '%s'",
             NNT_TEST_EXAMPLE, PROMPT, png_file, out);
    CU_ASSERT_EQUAL_FATAL(run(args), 0);
    nnt_tensor wt = {0}, ix = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "layers.0.mlp.expert_weights", &wt), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(nnt_safetensors_read(rt, out, "layers.0.mlp.expert_indices", &ix), NNT_OK);
    int S = (int)wt.shape[1], K = (int)wt.shape[2], E = 8; /* config.json: num_local_experts */
    double hi = 0;
    int at = 0;
    for (int i = 0; i < S * K; i++)
        if (((float *)wt.data)[i] > hi) hi = ((float *)wt.data)[i], at = i;
    plot_grid g = {.panels = 1, .panel_cols = 1, .rows = S, .cols = E, .vmin = 0, .vmax = hi, .cell_w = PLOT_CELL,
                   .cell_h = PLOT_CELL};
    png p;
    CU_ASSERT_EQUAL_FATAL(png_read(png_file, &p), 0);
    int w, h;
    plot_size(&g, &w, &h);
    CU_ASSERT(p.w == w && p.h == h);
    int e_at = (int)nnt_tensor_get_f64(&ix, at);
    CU_ASSERT(cell_is(&p, &g, 0, at / K, e_at, VIRIDIS_MAX));
    /* every token: its chosen experts in their weight's colour, the others at 0 */
    for (int s = 0; s < S; s++)
        for (int e = 0; e < E; e++) {
            double val = 0;
            for (int k = 0; k < K; k++)
                if ((int)nnt_tensor_get_f64(&ix, (int64_t)s * K + k) == e) val = ((float *)wt.data)[s * K + k];
            uint8_t want[3];
            plot_value_colour(&g, val, want);
            CU_ASSERT(cell_is(&p, &g, 0, s, e, want));
        }
    cairo_surface_destroy(p.s);
    nnt_tensor_free(&wt);
    nnt_tensor_free(&ix);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("plot", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "colormap ends", test_colormap_ends);
    CU_add_test(s, "a grid read back", test_grid_png);
    CU_add_test(s, "nnt lens --plot", test_cli_lens);
    CU_add_test(s, "nnt patch --plot", test_cli_patch);
    CU_add_test(s, "nnt trace --plot attention", test_cli_attention);
    CU_add_test(s, "nnt trace --plot routing", test_cli_routing);
    return 0;
}
