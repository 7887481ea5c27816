package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// point is one concurrency level's measurement.
type point struct {
	concurrency int
	perSecond   float64
	p99ms       float64
}

// drawCurve writes a PNG: accepted deliveries/s (blue, left axis) and p99
// latency (red, right axis) against concurrency on a log2 axis.
func drawCurve(path string, pts []point) error {
	const w, h, left, right, top, bottom = 760, 420, 70, 70, 40, 50
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	grey, blue, red, black := color.RGBA{220, 220, 220, 255}, color.RGBA{31, 90, 200, 255}, color.RGBA{200, 40, 40, 255}, color.RGBA{0, 0, 0, 255}
	maxRate, maxP99 := 0.0, 0.0
	for _, p := range pts {
		maxRate, maxP99 = math.Max(maxRate, p.perSecond), math.Max(maxP99, p.p99ms)
	}
	maxRate, maxP99 = niceCeil(maxRate), niceCeil(maxP99)
	x := func(c int) int {
		lo, hi := math.Log2(float64(pts[0].concurrency)), math.Log2(float64(pts[len(pts)-1].concurrency))
		return left + int((math.Log2(float64(c))-lo)/(hi-lo)*float64(w-left-right))
	}
	yRate := func(v float64) int { return h - bottom - int(v/maxRate*float64(h-top-bottom)) }
	yP99 := func(v float64) int { return h - bottom - int(v/maxP99*float64(h-top-bottom)) }
	for i := 0; i <= 4; i++ {
		y := top + i*(h-top-bottom)/4
		line(img, left, y, w-right, y, grey)
		label(img, 4, y+4, fmt.Sprintf("%6.0f/s", maxRate*float64(4-i)/4), blue)
		label(img, w-right+6, y+4, fmt.Sprintf("%.1f ms", maxP99*float64(4-i)/4), red)
	}
	line(img, left, h-bottom, w-right, h-bottom, black)
	for _, p := range pts {
		label(img, x(p.concurrency)-8, h-bottom+16, fmt.Sprint(p.concurrency), black)
	}
	label(img, w/2-60, h-10, "concurrent requests", black)
	label(img, left, 20, "guardian intake: accepted/s (blue), p99 latency (red)", black)
	for i := 1; i < len(pts); i++ {
		line(img, x(pts[i-1].concurrency), yRate(pts[i-1].perSecond), x(pts[i].concurrency), yRate(pts[i].perSecond), blue)
		line(img, x(pts[i-1].concurrency), yP99(pts[i-1].p99ms), x(pts[i].concurrency), yP99(pts[i].p99ms), red)
	}
	for _, p := range pts {
		dot(img, x(p.concurrency), yRate(p.perSecond), blue)
		dot(img, x(p.concurrency), yP99(p.p99ms), red)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		img.Set(x0+(x1-x0)*i/steps, y0+(y1-y0)*i/steps, c)
		img.Set(x0+(x1-x0)*i/steps, y0+(y1-y0)*i/steps+1, c)
	}
}

func dot(img *image.RGBA, x, y int, c color.Color) {
	for dx := -3; dx <= 3; dx++ {
		for dy := -3; dy <= 3; dy++ {
			if dx*dx+dy*dy <= 9 {
				img.Set(x+dx, y+dy, c)
			}
		}
	}
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
