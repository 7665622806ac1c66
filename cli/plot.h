/* plot.h - heatmap pictures for the nnt command (--plot FILE.png|FILE.svg), drawn with Cairo:
 * one or more panels of rows x columns cells, coloured by value on one shared scale (a
 * viridis-like colormap, dark violet at the minimum to yellow at the maximum), with an optional
 * text in each cell, row and column labels, panel titles and a colour bar. The layout is a fixed
 * function of the grid's sizes (plot_size, plot_cell), so a picture can be checked pixel by pixel.
 * Built without Cairo, plot_write fails with a message saying how to get it. */
#ifndef NNT_CLI_PLOT_H
#define NNT_CLI_PLOT_H

#include <stddef.h>
#include <stdint.h>

/* Sizes in pixels of the layout (see plot_size). */
#define PLOT_MARGIN 12
#define PLOT_TITLE_H 28     /* the picture's title */
#define PLOT_PANEL_TITLE_H 18
#define PLOT_ROW_LABEL_W 110 /* row labels, left of each panel */
#define PLOT_COL_LABEL_H 80  /* column labels (turned 45 degrees), above each panel's cells */
#define PLOT_GAP 16          /* between panels */
#define PLOT_BAR_W 70        /* the colour bar and its numbers, right of the panels */

/* Cell sizes the nnt command uses: cells with text (lens, patch) and without (attention, routing). */
#define PLOT_TEXT_CELL_W 84
#define PLOT_TEXT_CELL_H 30
#define PLOT_CELL 18

typedef struct plot_grid {
    const char *title;                /* the picture's title */
    int panels, panel_cols;           /* panels, and panels per line of the grid (>= 1) */
    const char *const *panel_titles;  /* [panels] or NULL */
    int rows, cols;                   /* cells of each panel */
    const double *values;             /* [panels, rows, cols]; NaN: no value (drawn grey) */
    const char *const *cell_text;     /* [panels, rows, cols] (entries may be NULL) or NULL */
    const char *const *row_labels;    /* [rows] or NULL */
    const char *const *col_labels;    /* [cols], or [panels, cols] when col_labels_per_panel; or NULL */
    int col_labels_per_panel;
    const char *row_axis, *col_axis;  /* the axes' names, or NULL */
    double vmin, vmax;                /* the colour scale: vmin gets colour 0, vmax colour 1 */
    int cell_w, cell_h;               /* pixels */
} plot_grid;

typedef struct plot_rect {
    int x, y, w, h;
} plot_rect;

/* 0 for a name ending in ".png", 1 for ".svg", -1 otherwise. */
int plot_format(const char *file);

/* The picture's width and height in pixels (an SVG's in points, the same numbers):
 *   width  = 2 * PLOT_MARGIN + panel_cols' * panel_w + (panel_cols' - 1) * PLOT_GAP + PLOT_BAR_W
 *   height = 2 * PLOT_MARGIN + PLOT_TITLE_H + lines * panel_h + (lines - 1) * PLOT_GAP
 * with panel_w = PLOT_ROW_LABEL_W + cols * cell_w, panel_h = PLOT_PANEL_TITLE_H +
 * PLOT_COL_LABEL_H + rows * cell_h, panel_cols' = min(panel_cols, panels), lines =
 * ceil(panels / panel_cols'). */
void plot_size(const plot_grid *g, int *width, int *height);

/* Where cell (r, c) of panel p lies in the picture (whole pixels, filled with one colour). */
plot_rect plot_cell(const plot_grid *g, int p, int r, int c);

/* The colormap's colour at t in [0, 1] (clamped; NaN gives grey 128), 8 bits per channel. */
void plot_colour(double t, uint8_t rgb[3]);

/* The colour of value v on g's scale (vmin..vmax; a scale of zero width gives colour 1). */
void plot_value_colour(const plot_grid *g, double v, uint8_t rgb[3]);

/* Draws g into file (PNG or SVG by its name), written under a temporary name in the same
 * directory and renamed, so an existing file is replaced whole or not at all. Returns 0, or -1
 * with a message naming the file in err (n bytes): an unknown extension, a Cairo failure, a
 * picture over 30000 pixels on a side, or a build without Cairo. */
int plot_write(const char *file, const plot_grid *g, char *err, size_t n);

#endif /* NNT_CLI_PLOT_H */
