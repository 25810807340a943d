package dashboard

// The drawing sizes its boxes and edge labels before the browser renders
// any text, so it estimates the widths of text on the wide side: the
// advance widths of DejaVu Sans, the widest of the common system
// sans-serif fonts, in thousandths of an em, for the printable ASCII
// characters; any other character counts as a full em.
var (
	regularWidths = [95]uint16{
		318, 401, 460, 838, 637, 951, 780, 275, 391, 391, 500, 838, 318, 361, 318, 337,
		637, 637, 637, 637, 637, 637, 637, 637, 637, 637, 337, 337, 838, 838, 838, 531,
		1000, 685, 687, 699, 771, 632, 576, 775, 752, 295, 295, 656, 558, 863, 749, 788,
		604, 788, 695, 635, 611, 732, 685, 989, 686, 611, 686, 391, 337, 391, 838, 500,
		500, 613, 635, 550, 635, 616, 353, 635, 634, 278, 278, 580, 278, 975, 634, 612,
		635, 635, 412, 521, 393, 634, 592, 818, 592, 592, 525, 637, 337, 637, 838,
	}
	boldWidths = [95]uint16{
		349, 457, 521, 838, 696, 1002, 873, 307, 458, 458, 523, 838, 380, 416, 380, 366,
		696, 696, 696, 696, 696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 581,
		1000, 774, 763, 734, 831, 684, 684, 821, 837, 373, 373, 775, 638, 996, 837, 851,
		733, 851, 771, 721, 683, 813, 774, 1104, 771, 725, 726, 458, 366, 458, 838, 500,
		500, 675, 716, 593, 716, 679, 436, 716, 712, 343, 343, 666, 343, 1042, 712, 688,
		716, 716, 494, 596, 479, 712, 652, 924, 646, 652, 583, 712, 366, 712, 838,
	}
)

// textWidth is the width in pixels of s in a sans-serif font of size px,
// a twentieth wider than DejaVu Sans draws it.
func textWidth(s string, px float64, bold bool) float64 {
	widths := &regularWidths
	if bold {
		widths = &boldWidths
	}
	var em float64
	for _, r := range s {
		switch {
		case r >= ' ' && r <= '~':
			em += float64(widths[r-' ']) / 1000
		case r == '×':
			em += 0.838
		default:
			em++
		}
	}
	return em * px * 1.05
}
