"""What a campaign is asked to do: params.yaml and the environments read, checked and identified
(config), and each target's scenario model (scenarios).
"""
